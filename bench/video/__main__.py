"""``python -m bench.video extend | report | run``."""

from bench.video.cli import main

raise SystemExit(main())
