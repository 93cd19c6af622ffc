#include "textflag.h"

// func prefetch(p *idxSlot)
TEXT ·prefetch(SB), NOSPLIT|NOFRAME, $0-8
	MOVD	p+0(FP), R0
	PRFM	(R0), PLDL1KEEP
	RET

// func prefetchString(s string)
TEXT ·prefetchString(SB), NOSPLIT|NOFRAME, $0-16
	MOVD	s_base+0(FP), R0
	PRFM	(R0), PLDL1KEEP
	RET
