"""python3 -m feedclient.pack COMMAND: packers written in Python (text.py).
Exit status 0, 1 on bad input (one line "feedclient.pack: <file>: <what>"
on stderr), 2 on a usage error."""

import argparse
import sys

from ..errors import FeedError
from . import text


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m feedclient.pack",
                                 description="Write feedd datasets from Python.")
    sub = ap.add_subparsers(dest="command", required=True)
    text.add_parser(sub)
    args = ap.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        ap.error("--workers: at least 1")
    try:
        args.run(args)
    except FeedError as e:
        print(f"feedclient.pack: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
