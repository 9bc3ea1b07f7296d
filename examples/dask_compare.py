"""refseg's folder comparison on a Dask cluster: reference arrays for a folder of images, then
each candidate file compared with its reference, the summary table at the end.

The work is refseg's own per-image functions, ``refseg.golden.scale.generate_reference`` and
``compare_image`` (plain functions of paths that return plain data), mapped over the images
by ``dask.distributed``; the result equals ``refseg golden reference`` followed by ``refseg
golden compare`` on one machine. The reference and candidate folders must be visible to every
worker (a shared file system beyond one machine).

Install: pip install "refseg[dask]"

Usage: python examples/dask_compare.py IMAGES CANDIDATES REFERENCE [--workers N]
                                       [--scheduler ADDRESS] [--report FILE]
  IMAGES      folder of image files
  CANDIDATES  folder of <image>.npz candidate files (the bundle's key names)
  REFERENCE   folder to write the reference files into (created)
  --workers   a LocalCluster of N single-threaded worker processes (default 2)
  --scheduler connect to a running cluster instead
"""
import argparse
import json
from pathlib import Path

from dask.distributed import Client, LocalCluster

from refseg.golden import references, scale


def run(client, images, candidates, reference):
    reference = Path(reference)
    reference.mkdir(parents=True, exist_ok=True)
    files = scale.image_files([images])
    records = client.gather(client.map(scale.generate_reference, files,
                                       out_dir=str(reference), pure=False))
    # the folder's index, as `refseg golden reference` writes it: `golden compare` reads it
    index = {r["image"]: {k: v for k, v in r.items() if k != "image"} for r in records}
    references.write_index(reference, index)
    names = sorted(index)
    results = client.gather(client.map(
        scale.compare_image, [reference / f"{n}.npz" for n in names],
        [Path(candidates) / f"{n}.npz" for n in names],
        [index[n]["sha256"] for n in names], pure=False))
    # a candidate file of an image not in IMAGES fails the comparison, as on one machine
    results += [scale.unreferenced(p.stem, candidates, reference)
                for p in Path(candidates).glob("*.npz") if p.stem not in index]
    return scale.summarize(sorted(results, key=lambda r: r["image"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("images")
    parser.add_argument("candidates")
    parser.add_argument("reference")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scheduler", default=None)
    parser.add_argument("--report", default=None)
    args = parser.parse_args()
    if args.scheduler:
        client, cluster = Client(args.scheduler), None
    else:
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    try:
        summary = run(client, args.images, args.candidates, args.reference)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    if args.report:
        Path(args.report).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(scale.summary_text(summary))
    raise SystemExit(0 if summary["passed"] == summary["images"] else 1)


if __name__ == "__main__":
    main()
