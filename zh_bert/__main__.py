from zh_bert.cli import main

raise SystemExit(main())
