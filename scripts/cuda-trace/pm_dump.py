"""Dumps the PM-sampling metrics of an Nsight Compute report (scripts/cuda-pm-timeline.sh).

usage: pm_dump.py REPORT.ncu-rep [BIN_NS]
Prints, per profiled workload, every sampled metric as "SAMPLE metric time_ns value" rows (time
relative to the first sample) and, for the DRAM throughput metrics, "BIN start_ns mean" rows
averaged over BIN_NS-wide bins. Needs ncu's extras/python on PYTHONPATH (ncu_report).
"""
import sys

import ncu_report


# PM-sampling metrics of the PmSampling section (Nsight Compute 2025, Hopper).
KNOWN = [
    "pmsampling:dramc__throughput.avg.pct_of_peak_sustained_elapsed",
    "pmsampling:dramc__read_throughput.avg.pct_of_peak_sustained_elapsed",
    "pmsampling:dramc__write_throughput.avg.pct_of_peak_sustained_elapsed",
    "pmsampling:dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "pmsampling:sm__cycles_active.avg",
    "pmsampling:tpc__warps_active_realtime.sum.per_cycle_active",
    "pmsampling:sm__inst_executed_realtime.avg.per_cycle_active",
    "pmsampling:l1tex__t_sector_hit_rate.pct",
    "pmsampling:sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
]


def samples(metric):
    """(timestamps, values) of an instanced (sampled) metric; empty when it has none."""
    n = metric.num_instances()
    if n == 0:
        return [], []
    ids = metric.correlation_ids()
    ts = [ids.as_uint64(i) for i in range(n)] if ids is not None else list(range(n))
    return ts, [metric.as_double(i) for i in range(n)]


def main():
    path = sys.argv[1]
    bin_ns = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    ctx = ncu_report.load_report(path)
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            act = rng.action_by_idx(a)
            print(f"# workload {r}.{a}: {act.name()}")
            names = sorted(n for n in act.metric_names() if n.startswith("pmsampling:"))
            if not names:  # some ncu versions leave the sampled series out of metric_names()
                names = [n for n in KNOWN if act.metric_by_name(n) is not None]
            print(f"# {len(names)} sampled metrics")
            if not names:
                sys.exit("pm_dump: the report holds no PM-sampling series (Nsight Compute 2025.3.1 keeps none "
                         "for a graph workload: only profiler__pmsampler_* attributes)")
            t0 = None
            series = {}
            for n in names:
                ts, vs = samples(act.metric_by_name(n))
                if ts:
                    t0 = ts[0] if t0 is None else min(t0, ts[0])
                    series[n] = (ts, vs)
            for n, (ts, vs) in series.items():
                print(f"# {n}: {len(ts)} samples")
                for t, v in zip(ts, vs):
                    print(f"SAMPLE {n} {t - t0} {v:.4g}")
            for n, (ts, vs) in series.items():
                if "dram" not in n:  # dram__ / dramc__ throughput
                    continue
                bins = {}
                for t, v in zip(ts, vs):
                    bins.setdefault((t - t0) // bin_ns, []).append(v)
                print(f"# {n} in {bin_ns} ns bins")
                for b in sorted(bins):
                    print(f"BIN {n} {b * bin_ns} {sum(bins[b]) / len(bins[b]):.4g}")


if __name__ == "__main__":
    main()
