import os
import tempfile

# Each test session builds into its own kernel cache unless one is given.
os.environ.setdefault("LOOPOPT_CACHE_DIR", os.path.join(tempfile.gettempdir(), "loopopt-test-cache"))
