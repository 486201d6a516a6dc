#!/usr/bin/env python3
# Summary of a cupti_trace.cpp timeline: splits it into graph replays (a gap of more than 20 us
# ends one), groups consecutive replays of the same kernel count (one benchmark each) and prints,
# averaged over each group's last 10 replays, the kernels at positions FIRST..LAST (argv[2],
# argv[3]; default 9 and 15) with start offset, duration and gap (start minus the previous
# kernel's end: negative when a programmatic dependent launch overlapped them), then every kernel
# (name, grid, block) with its mean duration and gap.
# usage: summary.py trace.csv [FIRST LAST]
import collections, signal, sys
# Piped into head, stop quietly when the reader goes away.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
rows = []
for line in open(sys.argv[1]):
    p = line.strip().split(',')
    if len(p) < 7: continue
    rows.append((int(p[0]), int(p[1]), p[2], int(p[3]), int(p[4]), int(p[5])))
rows.sort()
# replays: split where the gap between a kernel's start and the previous end exceeds 20 us
groups, cur = [], [rows[0]]
for r in rows[1:]:
    if r[0] - max(x[1] for x in cur[-3:]) > 20000: groups.append(cur); cur = [r]
    else: cur.append(r)
groups.append(cur)
sizes = collections.Counter(len(g) for g in groups)
print("replays by kernel count:", sizes.most_common(6))
lo_pos = int(sys.argv[2]) if len(sys.argv) > 2 else 9
hi_pos = int(sys.argv[3]) if len(sys.argv) > 3 else 15
# contiguous runs of replays of one size (one benchmark each: bf16 first, then fp32)
runs, prev = [], None
for i, g in enumerate(groups):
    if len(g) < 50: prev = None; continue
    if prev is not None and len(groups[prev]) == len(g) and prev == i - 1: runs[-1].append(g)
    else: runs.append([g])
    prev = i
for gs in runs:
    if len(gs) < 5: continue
    n = len(gs[0])
    tot = [(g[-1][1] - g[0][0]) / 1000 for g in gs]
    print(f"\n== replays of {n} kernels: {len(gs)}; span us min {min(tot):.1f} median {sorted(tot)[len(tot)//2]:.1f}")
    # average per-position start offset, duration, gap over the last 10 replays
    last = gs[-10:]
    acc = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for g in last:
        t0 = g[0][0]; pe = g[0][0]
        for i, r in enumerate(g):
            a = acc[i]; a[0] += (r[0] - t0) / 1000; a[1] += (r[1] - r[0]) / 1000; a[2] += (r[0] - pe) / 1000
            pe = r[1]
    g = last[-1]
    kind = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for i, r in enumerate(g):
        a = [v / len(last) for v in acc[i]]
        key = (r[2][:28], r[3], r[4])
        kind[key][0] += 1; kind[key][1] += a[1]; kind[key][2] += a[2]
        if lo_pos <= i < hi_pos:
            print(f"{i:3d} {r[2][:28]:28s} grid {r[3]:5d} blk {r[4]:5d} regs {r[5]:3d} start {a[0]:8.2f} dur {a[1]:7.2f} gap {a[2]:6.2f}")
    print("by kernel: count, mean dur, mean gap (start - previous end; negative = overlap)")
    for k, v in sorted(kind.items(), key=lambda kv: -kv[1][1]):
        print(f"  {k[0]:28s} grid {k[1]:5d} blk {k[2]:5d} n {v[0]:3d} dur {v[1]/v[0]:7.2f} gap {v[2]/v[0]:6.2f}")
