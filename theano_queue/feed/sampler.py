"""Which samples go into which batch, epoch after epoch, and where a run stopped.

Independent of how batches are produced (a thread, worker processes, slices of
an array in RAM): a :class:`Sampler` maps a *position*, the number of a batch
in the whole run, to the dataset indices of that batch; a :class:`Cursor`
records which positions the consumer has taken, and the pair gives a small
state dict to resume from.

An epoch's order is never held whole unless it must be: in index order a
batch's indices are arithmetic (O(batch) memory); a shuffled epoch of one
rank over a dataset that fits is numpy's permutation (8 bytes a row);
otherwise (a shard of a large dataset, or a dataset of more rows than
``ARRAY_ORDER_MAX_ROWS``) a :class:`KeyedPermutation`, computed a block
at a time from the seed and the epoch.

It lives in the feed package (which imports it) and imports only
``feed/state.py`` from it, which imports nothing of it: no circle; numpy's
permutations are made by the engine (``_engine.Permutation``).
"""

import numpy as np

from .. import _engine
from .state import STATE_VERSION, as_state, check_version

#: A shuffled shard (world > 1) of a dataset of more rows than this is a keyed permutation: numpy's would hold
#: the whole dataset's order in every rank.
KEYED_MIN_ROWS_SHARDED = 65_536
#: A shuffled dataset of more rows than this is a keyed permutation, whatever the shard: numpy's order would
#: take 8 bytes a row of the dataset (16 GiB at 2^31 rows).
ARRAY_ORDER_MAX_ROWS = 1 << 31

# The settings a saved state must agree with: resuming with any other would
# produce different batches.
_CONFIG_KEYS = ("length", "batch_size", "shard", "shuffle", "seed", "drop_last", "bucket_window")

#: Batches in a bucketing window when Feeder(bucket_by=...) is given no bucket_window.
DEFAULT_BUCKET_WINDOW = 16


class Cursor:
    """Positions done so far: every one below ``low``, and the sparse set ``above``.

    ``above`` holds positions done out of order (``ordered=False``); it stays
    as small as the number of batches in flight.
    """

    def __init__(self, low=0, above=()):
        self.low = int(low)
        self.above = {int(p) for p in above if p >= low}
        self._advance()

    def _advance(self):
        while self.low in self.above:
            self.above.discard(self.low)
            self.low += 1

    def add(self, position):
        if position == self.low:
            self.low += 1
            self._advance()
        elif position > self.low:
            self.above.add(position)

    def __contains__(self, position):
        return position < self.low or position in self.above

    def copy(self):
        return Cursor(self.low, self.above)

    def pending(self, total=None):
        """Positions not done, in order, up to ``total`` (None: without end)."""
        skip = set(self.above)
        position = self.low
        while total is None or position < total:
            if position not in skip:
                yield position
            position += 1

    def __repr__(self):
        return "Cursor(%d, %s)" % (self.low, sorted(self.above))


def shard_pair(shard):
    """``shard`` as ``(rank, world)`` (any pair of ints: a tuple, a list, an array); ValueError otherwise."""
    try:
        rank, world = shard
    except (TypeError, ValueError):
        raise ValueError("shard must be (rank, world), got %r" % (shard,)) from None
    return rank, world


def _int(value, what, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError("%s must be an int >= %d, got %r" % (what, low, value))
    return int(value)


class KeyedPermutation:
    """A bijection of ``range(n)`` drawn from ``key`` (a sequence of ints): position ``i`` of the order is
    ``self(i)``, computed for any block of positions without the rest.

    A Feistel network of ``ROUNDS`` rounds over the ``2**bits >= n``
    values of an even number of bits (a bijection of that range whatever its
    round function: here the top bits of a keyed multiply), with cycle-walking: a value ``>= n`` is encrypted again
    until it falls below ``n``, which keeps the bijection on ``range(n)``
    (``2**bits < 4 n``: under 4 rounds of walking on average).
    """

    ROUNDS = 4

    def __init__(self, n: int, key):
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        bits += bits % 2
        self.half = np.uint64(bits // 2)
        self.top = np.uint64(64 - bits // 2)
        self.mask = np.uint64((1 << (bits // 2)) - 1)
        # Odd multipliers and offsets, one pair per round, drawn from the key.
        drawn = np.random.SeedSequence(list(key)).generate_state(2 * self.ROUNDS, np.uint64)
        self.keys = [(drawn[2 * r] | np.uint64(1), drawn[2 * r + 1]) for r in range(self.ROUNDS)]

    def _encrypt(self, x):
        left, right = x >> self.half, x & self.mask
        for multiplier, offset in self.keys:
            # The round function: the top bits of a keyed multiply (multiplicative hashing) of the right half.
            mixed = right + offset
            mixed *= multiplier
            mixed >>= self.top
            mixed ^= left
            left, right = right, mixed
        left <<= self.half
        left |= right
        return left

    def __call__(self, positions) -> np.ndarray:
        """The permutation's values at ``positions`` (ints in ``range(n)``), as int64."""
        with np.errstate(over="ignore"):
            out = self._encrypt(np.asarray(positions, np.int64).view(np.uint64))
            walking = np.flatnonzero(out >= np.uint64(self.n))
            while walking.size:
                out[walking] = self._encrypt(out[walking])
                walking = walking[out[walking] >= np.uint64(self.n)]
        return out.view(np.int64)


class Sampler:
    """The batches of one rank: a permutation per epoch, a shard of it, cut into batches.

    Position ``p`` is batch ``p % batches_per_epoch`` of epoch
    ``p // batches_per_epoch``.  The batches are a function of the settings
    and ``p`` alone, so any process can compute any batch, and a run resumed
    from a saved position continues with the same batches.

    * ``shuffle``: epoch ``e`` visits the dataset in a permutation drawn from
      ``numpy.random.SeedSequence([seed, e])``; otherwise in index order.
    * ``shard=(rank, world)``: as ``torch.utils.data.DistributedSampler``.
      The epoch's order is padded by repeating its first indices up to a
      multiple of ``world`` (or, with ``drop_last``, cut down to one), and
      rank ``r`` takes every ``world``-th index starting at ``r``: the ranks'
      shards are disjoint (but for the padding), equal-sized, and together
      the whole epoch.
    * ``drop_last``: also drops the epoch's last batch when it is short, as
      ``DataLoader(drop_last=True)``; otherwise it is a partial batch.
    * ``epochs``: the run's length; ``None`` for no end.
    * ``bucket_by``: a function of an int64 array of dataset indices giving
      their lengths.  The epoch's order (after shuffle, shard and
      drop_last) is cut into windows of ``bucket_window`` batches; each
      window is sorted by length (stably) and cut into batches, whose order
      within the window is shuffled (with ``shuffle``) from the seed, the
      epoch and the window.  Every sample of the epoch still comes exactly
      once; a partial batch stays last.  Each index's length is asked once.

    ``permutation`` says how a shuffled epoch is drawn: ``"numpy"``
    (``Generator.permutation``, held whole) or ``"keyed"`` (a
    :class:`KeyedPermutation` keyed by ``[seed, epoch]``, computed per
    block); a saved state records it, and a resumed one keeps it.
    """

    def __init__(
        self,
        length,
        batch_size,
        shuffle=False,
        seed=0,
        shard=(0, 1),
        drop_last=False,
        epochs=1,
        bucket_by=None,
        bucket_window=None,
    ):
        self.length = _int(length, "the dataset's length", 0)
        self.batch_size = _int(batch_size, "batch_size", 1)
        self.seed = _int(seed, "seed", 0)
        rank, world = shard_pair(shard)
        self.world = _int(world, "shard's world size", 1)
        self.rank = _int(rank, "shard's rank", 0)
        if self.rank >= self.world:
            raise ValueError("shard=(%d, %d): the rank must be below the world size" % (self.rank, self.world))
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.epochs = None if epochs is None else _int(epochs, "epochs", 0)
        if self.drop_last and self.length % self.world:
            self.per_rank = self.length // self.world
        else:
            self.per_rank = -(-self.length // self.world)
        self.total_size = self.per_rank * self.world
        if self.drop_last:
            self.batches_per_epoch = self.per_rank // self.batch_size
        else:
            self.batches_per_epoch = -(-self.per_rank // self.batch_size)
        if self.batches_per_epoch == 0:
            self.total = 0
        else:
            self.total = None if self.epochs is None else self.epochs * self.batches_per_epoch
        self._cached = (None, None)
        self._keyed = (None, None)
        self.permutation = None
        if self.shuffle:
            large = self.length > ARRAY_ORDER_MAX_ROWS or (self.world > 1 and self.length > KEYED_MIN_ROWS_SHARDED)
            self.permutation = "keyed" if large else "numpy"
        self.bucket_by = bucket_by
        self.bucket_window = None
        if bucket_by is not None:
            if not callable(bucket_by):
                raise TypeError("bucket_by must be a function, got %r" % (bucket_by,))
            self.bucket_window = _int(
                DEFAULT_BUCKET_WINDOW if bucket_window is None else bucket_window, "bucket_window", 1
            )
            self._lengths = np.full(self.length, -1, np.int64)  # -1: not asked yet
        elif bucket_window is not None:
            raise ValueError("bucket_window=%r needs bucket_by, the length function to bucket by" % (bucket_window,))

    @property
    def config(self):
        return {
            "length": self.length,
            "batch_size": self.batch_size,
            "shard": [self.rank, self.world],
            "shuffle": self.shuffle,
            "seed": self.seed,
            "drop_last": self.drop_last,
            "bucket_window": self.bucket_window,
        }

    @property
    def holds_epochs(self) -> bool:
        """Whether an epoch's order is held whole (numpy's permutation, or bucketing): else computed per block."""
        return self.permutation == "numpy" or self.bucket_by is not None

    def epoch_indices(self, epoch):
        """This rank's dataset indices for ``epoch``, in order (int64): the whole shard, held."""
        cached = self._cached  # read once: another thread's keep() never pairs one epoch with another's indices
        if cached[0] == epoch:
            return cached[1]
        mine = self.order(epoch)
        self.keep(epoch, mine)
        return mine

    def keep(self, epoch, indices):
        """Makes ``indices`` (what :meth:`order` gave for ``epoch``) the epoch that :meth:`epoch_indices` gives."""
        self._cached = (epoch, indices)

    def order(self, epoch):
        """:meth:`epoch_indices` computed anew, not kept.

        Without ``bucket_by`` it calls no Python of the user's (the engine makes numpy's permutation), and any
        thread may call it.
        """
        if self.permutation == "numpy":
            mine = self.sharded(_engine.permutation(self.bit_generator(epoch), self.length))
        else:
            mine = self.computed(epoch, 0, self.per_rank)
        if self.bucket_by is not None:
            mine = self._bucketed(epoch, mine)
        return mine

    def bit_generator(self, epoch):
        """The bit generator of epoch ``epoch``'s permutation (``permutation="numpy"``): the draws of
        ``Generator(PCG64(SeedSequence([seed, epoch]))).permutation(length)``, made by the engine
        (``_engine.permutation``, without the GIL)."""
        return np.random.PCG64(np.random.SeedSequence([self.seed, epoch]))

    def permuting(self, epoch):
        """Epoch ``epoch``'s permutation begun in idle time on a thread of the engine: an
        ``_engine.Permutation``, whose ``result()`` :meth:`sharded` makes the epoch's order."""
        return _engine.Permutation(self.bit_generator(epoch), self.length)

    def sharded(self, permutation):
        """This rank's share of a permutation of the dataset, padded by repeating from its start."""
        if self.total_size > self.length and self.length:
            permutation = np.resize(permutation, self.total_size)
        permutation = permutation[: self.total_size]
        return np.ascontiguousarray(permutation[self.rank : self.total_size : self.world])

    def computed(self, epoch, start, stop):
        """This rank's indices ``[start, stop)`` of ``epoch``'s order, computed without the rest of it.

        Position ``i`` of the rank is position ``rank + world * i`` of the
        epoch's order, which pads by repeating from its start.
        """
        positions = np.arange(start, stop, dtype=np.int64)
        positions *= self.world
        positions += self.rank
        if self.total_size > self.length:
            positions %= self.length
        if self.permutation == "keyed":
            return self.keyed(epoch)(positions)
        return positions

    def keyed(self, epoch):
        """The :class:`KeyedPermutation` of ``epoch`` (the last one made is kept)."""
        cached = self._keyed
        if cached[0] != epoch:
            cached = (epoch, KeyedPermutation(self.length, [self.seed, epoch]))
            self._keyed = cached
        return cached[1]

    def indices(self, epoch, start, stop):
        """This rank's dataset indices ``[start, stop)`` of ``epoch`` (int64): O(stop - start) memory unless the
        epoch is held (``holds_epochs``)."""
        if self.holds_epochs:
            return self.epoch_indices(epoch)[start:stop]
        return self.computed(epoch, start, stop)

    def lengths_of(self, indices):
        """bucket_by's lengths of ``indices``, each asked once per Sampler."""
        missing = np.unique(indices[self._lengths[indices] < 0])
        if len(missing):
            got = np.asarray(self.bucket_by(missing))
            if got.shape != missing.shape or got.dtype.kind not in "iuf":
                raise ValueError(
                    "bucket_by gave %r for %d samples; expected one length (a number) per sample"
                    % (got if got.size < 8 else got.shape, len(missing))
                )
            self._lengths[missing] = got.astype(np.int64)
        return self._lengths[indices]

    def _bucketed(self, epoch, mine):
        """``mine`` reordered so that each window's batches hold samples of similar length."""
        used = min(len(mine), self.batches_per_epoch * self.batch_size)  # drop_last's dropped tail stays last
        window = self.bucket_window * self.batch_size
        out = [mine[used:]]
        parts = []
        for w, start in enumerate(range(0, used, window)):
            chunk = mine[start : start + window]
            chunk = chunk[np.argsort(self.lengths_of(chunk), kind="stable")]
            batches = [chunk[b : b + self.batch_size] for b in range(0, len(chunk), self.batch_size)]
            full = [b for b in batches if len(b) == self.batch_size]
            if self.shuffle:
                rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch, 1 + w])))
                full = [full[i] for i in rng.permutation(len(full))]
            parts.extend(full + [b for b in batches if len(b) < self.batch_size])
        return np.ascontiguousarray(np.concatenate(parts + out) if parts else mine)

    def epoch_of(self, position):
        return position // self.batches_per_epoch if self.batches_per_epoch else 0

    def batch(self, position):
        """Dataset indices of the batch at ``position`` (int64; shorter for a partial last batch)."""
        if self.total is not None and not 0 <= position < self.total:
            raise IndexError("position %d is outside the run's %d batches" % (position, self.total))
        epoch, b = divmod(position, self.batches_per_epoch)
        return self.indices(epoch, b * self.batch_size, min((b + 1) * self.batch_size, self.per_rank))

    def pending(self, cursor):
        """Positions of the run not yet done according to ``cursor``, in order."""
        return cursor.pending(self.total)

    # ---- resume ------------------------------------------------------------------

    def state_dict(self, cursor):
        """A small picklable dict: ``cursor`` and the settings it is valid for."""
        state = {"version": STATE_VERSION, "kind": "map", "position": cursor.low, "done": sorted(cursor.above)}
        if self.permutation is not None:
            state["permutation"] = self.permutation
        if self.batches_per_epoch:
            state["epoch"], state["batch"] = divmod(cursor.low, self.batches_per_epoch)
        state.update(self.config)
        return state

    def cursor(self, state=None):
        """The cursor a state dict saved; a fresh one for None.

        ValueError, naming the field, when the state does not fit these
        settings or a field is missing or out of range.
        """
        if state is None:
            return Cursor()
        state = as_state(state, "map", "a map-style or array dataset")
        version = check_version(state)
        config = self.config
        missing = [key for key in _CONFIG_KEYS + ("position",) if key not in state]
        if missing:
            raise ValueError("the state has no %s: it was not saved by Feeder.state_dict()" % ", ".join(missing))
        wrong = [
            "\n  %s: saved %r, this Feeder has %r (%s)"
            % (key, _listed(state.get(key)), config[key], _resume_hint(key, _listed(state.get(key))))
            for key in _CONFIG_KEYS
            if _listed(state.get(key)) != config[key]
        ]
        if wrong:
            raise ValueError(
                "the state was saved with other settings; resuming would give other batches:" + "".join(wrong)
            )
        position = _int(state["position"], "the state's position", 0)
        done = state.get("done", [])
        if not isinstance(done, (list, tuple)):
            raise ValueError("the state's done must be a list of positions, got %r" % (done,))
        done = [_int(p, "each of the state's done positions", position + 1) for p in done]
        if self.total is not None and max([position] + done) > self.total:
            raise ValueError(
                "the state's position %d (done: %s) lies past the run's %d batches" % (position, done, self.total)
            )
        if self.batches_per_epoch and ("epoch" in state or "batch" in state):
            saved = (state.get("epoch"), state.get("batch"))
            if saved != divmod(position, self.batches_per_epoch):
                raise ValueError(
                    "the state's epoch and batch %r do not match its position %d (%d batches per epoch)"
                    % (saved, position, self.batches_per_epoch)
                )
        if self.shuffle:  # the order the state was saved with (version 1 knew numpy's alone)
            saved = state.get("permutation", "numpy") if version >= 2 else "numpy"
            if saved not in ("numpy", "keyed"):
                raise ValueError("the state's permutation must be 'numpy' or 'keyed', got %r" % (saved,))
            self.permutation = saved
            self._cached = (None, None)
        return Cursor(position, done)


def _resume_hint(key, saved):
    """What would resume a state whose ``key`` was ``saved``."""
    if key == "length":
        return "resume it over the dataset it was saved from, of %r samples" % (saved,)
    if key == "batch_size":
        return "resume it into a queue of batches of %r rows" % (saved,)
    if key == "shard" and isinstance(saved, list):
        return "give shard=%r" % (tuple(saved),)
    return "give %s=%r" % (key, saved)


def _listed(value):
    """A saved field as config() gives it: a tuple or array (a shard pair) as a list of Python values."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, list)):
        return [v.item() if isinstance(v, np.generic) else v for v in value]
    return value.item() if isinstance(value, np.generic) else value


def split_rows(rows, parts):
    """``[start, stop)`` ranges that cut ``rows`` rows into at most ``parts`` nearly equal pieces."""
    parts = max(1, min(parts, rows))
    bounds = [rows * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i + 1] > bounds[i]]
