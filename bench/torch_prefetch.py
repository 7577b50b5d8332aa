"""The PyTorch peers' prefetcher (bench/torch_peer.py, bench/torch_workers_peer.py): PyTorch's usual idiom, the
next batch copied to the device on a side stream (wait_stream, record_stream) while the current one is used.

Imports PyTorch only: the peers run with a Python that has PyTorch, not Theano.
"""

import torch


def _tensors(batch):
    return batch if isinstance(batch, (list, tuple)) else [batch]


class Prefetcher:
    """Iterates over a DataLoader's batches (a tensor, or a list of tensors), each on the device already."""

    def __init__(self, loader):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        self.preload()

    def preload(self):
        try:
            host = next(self.loader)
        except StopIteration:
            self.next = None
            return
        with torch.cuda.stream(self.stream):
            if isinstance(host, (list, tuple)):
                self.next = [t.cuda(non_blocking=True) for t in host]
            else:
                self.next = host.cuda(non_blocking=True)

    def __iter__(self):
        return self

    def __next__(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        batch = self.next
        if batch is None:
            raise StopIteration
        for t in _tensors(batch):
            t.record_stream(torch.cuda.current_stream())
        self.preload()
        return batch
