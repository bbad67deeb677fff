import sys

if sys.argv[1:2] == ["run"]:
    # Before importing anything heavy: a signal during start-up is held, not fatal.
    from alivemcp.app.lifecycle import hold_signals

    hold_signals()

from alivemcp.cli import main

raise SystemExit(main())
