"""Where an engine plan's prediction time goes: every step of ``refseg.engine.plan`` timed
alone, summed by kind and algorithm, the slowest steps listed.

Each step runs on the values the plan computed before it (one prediction, kept whole), the
best of ``--repeat`` calls after one warm-up; the steps' sum is set beside one whole
prediction (the difference is the plan's own bookkeeping and the allocator). ``--save FILE``
writes the per-step times as JSON; ``--compare FILE`` sets this run's steps beside those of a
saved run (another commit, other choices), step by step and by algorithm. On a shared machine
compare only runs taken close together, and note the load (printed first).

Usage::

    python benchmarks/_plan_profile.py [--size 224] [--batch 1] [--mode estimate|measure]
        [--repeat 5] [--threads T] [--top 15] [--save FILE] [--compare FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224, help="input side (multiple of 32)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--mode", choices=("estimate", "measure"), default="estimate")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="default: all cores")
    parser.add_argument("--top", type=int, default=15, help="slowest steps listed")
    parser.add_argument("--save", help="write the per-step times here (JSON)")
    parser.add_argument("--compare", help="a --save file to set beside this run")
    args = parser.parse_args(argv)
    if args.size <= 0 or args.size % 32 or args.batch < 1 or args.repeat < 1 or \
            (args.threads is not None and args.threads < 1):
        parser.error("--size a positive multiple of 32; --batch, --repeat, --threads >= 1")
    if args.compare and not os.path.isfile(args.compare):
        parser.error(f"--compare: no such file {args.compare}")
    return args


def _group(step) -> str:
    return f"{step.kind}/{step.order}"


def profile(args) -> dict:
    from refseg import engine  # before NumPy: refseg sets how OpenBLAS's idle threads wait
    import numpy as np

    from refseg.engine.runtime import engine_threads
    from refseg.models import ResMobileNet
    from refseg.models.graph import INPUT

    model = ResMobileNet((args.size, args.size), seed=0)
    start = time.perf_counter()
    plan = engine.plan(model, mode=args.mode)
    built = time.perf_counter() - start
    x = np.random.default_rng(0).uniform(-1, 1, (args.batch, args.size, args.size, 3)
                                         ).astype(np.float32)
    threads = args.threads or len(os.sched_getaffinity(0))
    with engine_threads(threads):
        values = plan.run(x, keep_all=True)
        whole = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            plan.predict(x, batch_size=args.batch)
            whole.append(time.perf_counter() - start)
        steps = []
        for step in plan.steps:
            inputs = {name: values[name] for name in step.inputs}
            step.run(inputs)
            best = float("inf")
            for _ in range(args.repeat):
                start = time.perf_counter()
                step.run(inputs)
                best = min(best, time.perf_counter() - start)
            steps.append({"step": step.name, "group": _group(step), "seconds": best})
    del values[INPUT]
    memory = plan.memory()
    return {"size": args.size, "batch": args.batch, "mode": args.mode, "threads": threads,
            "build_seconds": built, "predict_seconds": min(whole), "steps": steps,
            "memory": memory, "choices": plan.choices}


def _by_group(result) -> dict:
    groups = defaultdict(lambda: [0, 0.0])
    for row in result["steps"]:
        groups[row["group"]][0] += 1
        groups[row["group"]][1] += row["seconds"]
    return groups


def report(result, other=None) -> None:
    ms = 1e3
    total = sum(row["seconds"] for row in result["steps"])
    memory = result["memory"]
    print(f"input {result['size']}x{result['size']}, batch {result['batch']}, "
          f"mode {result['mode']}, {result['threads']} threads; load {os.getloadavg()[0]:.2f}")
    print(f"plan built in {result['build_seconds']:.2f} s; {len(result['steps'])} steps; "
          f"memory {memory['plan'] / 2**20:.1f} MiB = "
          f"{memory['plan'] / memory['model_weights']:.2f}x the weights")
    print(f"one prediction {result['predict_seconds'] * ms:.1f} ms; the steps alone "
          f"{total * ms:.1f} ms\n")
    groups, before = _by_group(result), _by_group(other) if other else {}
    print(f"{'kind/algorithm':28s} {'steps':>5s} {'ms':>8s} {'share':>6s}" +
          (f" {'then ms':>8s} {'then steps':>10s}" if other else ""))
    for name in sorted(set(groups) | set(before), key=lambda g: -groups.get(g, [0, 0])[1]):
        count, seconds = groups.get(name, (0, 0.0))
        line = f"{name:28s} {count:5d} {seconds * ms:8.2f} {seconds / total:6.1%}"
        if other:
            then = before.get(name, (0, 0.0))
            line += f" {then[1] * ms:8.2f} {then[0]:10d}"
        print(line)
    print(f"\nslowest {min(len(result['steps']), 15)} steps:")
    then = {row["step"]: row for row in other["steps"]} if other else {}
    for row in sorted(result["steps"], key=lambda r: -r["seconds"])[:15]:
        line = f"  {row['step']:32s} {row['group']:28s} {row['seconds'] * ms:7.2f} ms"
        if row["step"] in then:
            old = then[row["step"]]
            line += f"   then {old['seconds'] * ms:7.2f} ms ({old['group']})"
        print(line)
    if other:
        gone = sorted(set(then) - {row["step"] for row in result["steps"]})
        if gone:
            print(f"\nsteps of the compared run not in this one: {len(gone)} "
                  f"({sum(then[name]['seconds'] for name in gone) * ms:.2f} ms): "
                  f"{', '.join(gone[:8])}{' ...' if len(gone) > 8 else ''}")
        old_total = sum(row["seconds"] for row in other["steps"])
        print(f"steps' sum {total * ms:.1f} ms against {old_total * ms:.1f} ms "
              f"({total / old_total:.2f}x); prediction {result['predict_seconds'] * ms:.1f} "
              f"against {other['predict_seconds'] * ms:.1f} ms")


def main(argv=None) -> int:
    args = _arguments(argv)
    other = None
    if args.compare:
        try:
            with open(args.compare) as handle:
                other = json.load(handle)
            other["steps"], other["predict_seconds"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"_plan_profile: --compare {args.compare}: not a saved profile ({error})",
                  file=sys.stderr)
            return 2
    result = profile(args)
    report(result, other)
    if args.save:
        with open(args.save, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
