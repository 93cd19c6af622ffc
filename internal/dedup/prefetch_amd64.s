#include "textflag.h"

// func prefetch(p *idxSlot)
TEXT ·prefetch(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ	p+0(FP), AX
	PREFETCHT0	(AX)
	RET

// func prefetchString(s string)
TEXT ·prefetchString(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ	s_base+0(FP), AX
	PREFETCHT0	(AX)
	RET
