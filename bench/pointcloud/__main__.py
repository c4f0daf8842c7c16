"""``python -m bench.pointcloud`` (see :func:`bench.pointcloud.cli.main`)."""

from bench.pointcloud.cli import main

main()
