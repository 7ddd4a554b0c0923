"""``python -m headway``: the ``headway`` command."""

from .cli import main

raise SystemExit(main())
