#include "textflag.h"

// func probeMask(line *[lineWords]atomic.Int64, fp uint64) uint32
//
// Bit 2e+1 of the result is set if entry e of the line, the high half of
// its 32 bits, holds fingerprint fp or 0: the line's 32 halves of 16 bits
// compared with fp and with 0, and the odd halves, the fingerprints, kept.
TEXT ·probeMask(SB), NOSPLIT|NOFRAME, $0-20
	MOVQ line+0(FP), AX
	MOVQ fp+8(FP), BX
	MOVQ BX, X0
	PSHUFLW $0, X0, X0
	PSHUFD $0, X0, X0
	PXOR X7, X7
	MOVOU 0(AX), X1
	MOVOU 16(AX), X2
	MOVOU 32(AX), X3
	MOVOU 48(AX), X4
	MOVO X1, X5
	PCMPEQW X0, X1
	PCMPEQW X7, X5
	POR X5, X1
	MOVO X2, X6
	PCMPEQW X0, X2
	PCMPEQW X7, X6
	POR X6, X2
	MOVO X3, X5
	PCMPEQW X0, X3
	PCMPEQW X7, X5
	POR X5, X3
	MOVO X4, X6
	PCMPEQW X0, X4
	PCMPEQW X7, X6
	POR X6, X4
	// 0xffff or 0 a half, packed to a byte each, one bit each.
	PACKSSWB X2, X1
	PACKSSWB X4, X3
	PMOVMSKB X1, CX
	PMOVMSKB X3, DX
	SHLL $16, DX
	ORL DX, CX
	ANDL $0xaaaaaaaa, CX
	MOVL CX, ret+16(FP)
	RET
