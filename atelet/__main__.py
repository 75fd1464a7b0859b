"""``python -m atelet``."""

from atelet.main import main

main()
