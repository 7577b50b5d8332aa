# Kept: `import theano_queue.keras as tqk` (before keras) is the path the guides and user code use.
from .clients.keras import *  # noqa: F403
