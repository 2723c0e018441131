"""``python -m bootstrap.cli``: the same entry point as the ``nodesmith`` script."""

from bootstrap.cli.main import main

raise SystemExit(main())
