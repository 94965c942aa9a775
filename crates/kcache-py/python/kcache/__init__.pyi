from kcache._kcache import *  # noqa: F401,F403
from kcache._kcache import __version__ as __version__
