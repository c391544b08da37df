package report

import (
	"fmt"
	"strings"
)

// Column is a column of a Table: its heading, and how its cells align.
type Column struct {
	Head  string // the heading
	Right bool   // align right, as figures do
}

// Text returns a column of text, aligned left.
func Text(head string) Column { return Column{Head: head} }

// Num returns a column of figures, aligned right.
func Num(head string) Column { return Column{Head: head, Right: true} }

// Table is a markdown table built row by row. The zero value is not
// usable; call NewTable.
type Table struct {
	cols []Column
	rows [][]string
}

// NewTable returns an empty table with the given columns.
func NewTable(cols ...Column) *Table { return &Table{cols: cols} }

// Row adds a row. It panics unless it has one cell per column: a table
// with rows of different lengths is a bug in its writer.
func (t *Table) Row(cells ...string) {
	if len(cells) != len(t.cols) {
		panic(fmt.Sprintf("report: a row of %d cells in a table of %d columns", len(cells), len(t.cols)))
	}
	t.rows = append(t.rows, cells)
}

// Len returns the number of rows added.
func (t *Table) Len() int { return len(t.rows) }

// String returns the table in markdown: the headings, the line that sets
// the alignment, and the rows, each line ending in a newline. A "|" in a
// cell is escaped and a line break becomes a space, so that no cell can
// break the table.
func (t *Table) String() string {
	var b strings.Builder
	line := func(cells []string) {
		for _, c := range cells {
			b.WriteString("| ")
			b.WriteString(cell(c))
			b.WriteByte(' ')
		}
		b.WriteString("|\n")
	}
	heads := make([]string, len(t.cols))
	align := make([]string, len(t.cols))
	for i, c := range t.cols {
		heads[i], align[i] = c.Head, "---"
		if c.Right {
			align[i] = "---:"
		}
	}
	line(heads)
	b.WriteString("| " + strings.Join(align, " | ") + " |\n")
	for _, r := range t.rows {
		line(r)
	}
	return b.String()
}

// cell returns s made safe for a markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}
