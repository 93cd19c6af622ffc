#!/usr/bin/env python3
"""tracestat.py: how busy a Go program's goroutines kept its Ps in an
execution trace, and what its consume loop waited on meanwhile.

    go tool trace -d=parsed bench-0.trace > trace.txt
    scripts/tracestat.py trace.txt

(The trace: test/bench with BENCH_PROFILE_DIR and BENCH_TRACE set, or
/debug/pprof/trace of a processor run with metrics_pprof.)

It reads the goroutine state transitions of the parsed dump and prints:
- how long no goroutine, and how long exactly one, was running, with the
  function each lone goroutine was started with;
- the running time per such function;
- for the goroutine of consume.(*Processor).loop: the time spent in each
  state and place it waited in, with how much of it had at most one
  goroutine running (a wait in which the other core was idle, as far as
  the program goes).

A measurement aid for docs/BENCHMARKS.md, not a test.
"""
import collections
import re
import sys

TRANSITION = re.compile(
    r'^M=\S+ P=\S+ G=\S+ StateTransition Time=(\d+) (GoID|ProcID)=(\d+) '
    r'(\w+)->(\w+) Reason="([^"]*)"')


def parse(path):
    """Returns the goroutine transitions, sorted by time: (t, id, from, to,
    reason, transition stack, stack), stacks as lists of function names."""
    lines = open(path).read().split('\n')
    out, i = [], 0
    while i < len(lines):
        m = TRANSITION.match(lines[i])
        if not m:
            i += 1
            continue
        t, kind, gid, a, b, reason = m.groups()
        tstack, stack, cur = [], [], None
        j = i + 1
        while j < len(lines) and not lines[j].startswith('M='):
            line = lines[j]
            if line.startswith('TransitionStack='):
                cur = tstack
            elif line.startswith('Stack='):
                cur = stack
            elif line.startswith('\t') and not line.startswith('\t\t') and cur is not None:
                cur.append(line.strip().split(' @')[0])
            j += 1
        if kind == 'GoID':
            out.append((int(t), int(gid), a, b, reason, tstack, stack))
        i = j
    out.sort(key=lambda r: r[0])
    return out


def short(name):
    return (name.replace('github.com/vibeline/processor/internal/', '')
            .replace('github.com/twmb/franz-go/pkg/', ''))


def names(recs):
    """A goroutine's name: the function it was started with (the first
    frame of its creation's transition stack), else the outermost
    non-runtime frame seen."""
    name = {}
    for _, g, a, _, _, tstack, _ in recs:
        if a == 'NotExist' and tstack and g not in name:
            name[g] = short(tstack[0])
    for _, g, _, _, _, tstack, stack in recs:
        if g not in name:
            frames = [f for f in (stack or tstack) if not f.startswith('runtime.')]
            if frames:
                name[g] = short(frames[-1])
    return name


def main():
    recs = parse(sys.argv[1])
    if not recs:
        sys.exit('tracestat: no goroutine transitions in ' + sys.argv[1])
    name = names(recs)
    loop = collections.Counter()
    for _, g, a, _, _, tstack, _ in recs:
        if a == 'Running' and any('Processor).loop' in f for f in tstack):
            loop[g] += 1
    loop_g = loop.most_common(1)[0][0] if loop else None

    t0, last = recs[0][0], recs[0][0]
    running, started = set(), {}
    none_ns, alone, run = 0, collections.Counter(), collections.Counter()
    where, in_state, in_state_lone = ('?', ''), collections.Counter(), collections.Counter()
    for t, g, a, b, reason, tstack, _ in recs:
        d, last = t - last, t
        if not running:
            none_ns += d
        elif len(running) == 1:
            alone[name.get(next(iter(running)), '?')] += d
        in_state[where] += d
        if len(running) <= 1:
            in_state_lone[where] += d
        if b == 'Running':
            running.add(g)
            started[g] = t
        elif a == 'Running':
            running.discard(g)
            if g in started:
                run[name.get(g, '?')] += t - started.pop(g)
        if g == loop_g:
            frames = [short(f) for f in tstack if 'vibeline' in f or 'kgo' in f][:3]
            where = (b, reason + ' @ ' + ' < '.join(frames) if b in ('Waiting', 'Syscall') else '')
    span = last - t0
    print(f'span {span / 1e6:.0f} ms; no goroutine running {none_ns / 1e6:.0f} ms')
    for fn, ns in alone.most_common(8):
        print(f'alone {ns / 1e6:8.1f} ms  {fn}')
    for fn, ns in run.most_common(10):
        print(f'ran   {ns / 1e6:8.1f} ms  {fn}')
    if loop_g is not None:
        print(f'consume loop (goroutine {loop_g}): state, ms, ms with at most one goroutine running')
        for (state, at), ns in in_state.most_common(10):
            print(f'  {ns / 1e6:7.0f} {in_state_lone[(state, at)] / 1e6:7.0f}  {state} {at}')


if __name__ == '__main__':
    main()
