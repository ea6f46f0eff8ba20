"""The study's measure mode on Cloud TPU v4 slices (dry run by default).

  python scripts/launch_tpu_sweep.py --project my-project \\
      --zone us-central2-b --bucket gs://my-bucket/study \\
      --repository https://github.com/<you>/arithmetic-decoding     # prints
  python scripts/launch_tpu_sweep.py ... --execute                   # runs

See apps/arithmetic_apps/study/launcher.py for what each step does.
"""

import argparse
import json
import sys

from arithmetic_apps.study.launcher import LaunchConfig, execute, plan
from arithmetic_apps.topology import available_topologies


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--project", required=True)
  parser.add_argument("--zone", required=True)
  parser.add_argument("--bucket", required=True)
  parser.add_argument("--repository", required=True,
                      help="git URL of arithmetic-decoding to install")
  parser.add_argument("--checkpoint", default=None)
  parser.add_argument("--preset", default="xxl")
  parser.add_argument("--topologies", nargs="+",
                      default=list(available_topologies()))
  parser.add_argument("--execute", action="store_true")
  args = parser.parse_args(argv)
  cfg = LaunchConfig(project=args.project, zone=args.zone, bucket=args.bucket,
                     repository=args.repository, checkpoint=args.checkpoint,
                     preset=args.preset)
  steps = plan(cfg, args.topologies)
  if args.execute:
    execute(steps)
  else:
    for step in steps:
      print(f"# {step.name}\n{step.shell()}")
    print(json.dumps({"steps": len(steps), "executed": False}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
