from alivemcp.cli import main

raise SystemExit(main())
