"""PyTensor's dequeued variables are named after their components, as Theano's are (issue 41.4)."""

import theano_queue.pytensor as tq


def test_dequeued_variables_are_named_after_their_components():
    q = tq.Queue([("image", "uint8", (4, 2, 2)), ("label", "int32", (4,))])
    assert [v.name for v in q.dequeue()] == ["image", "label"]
    varlen = tq.Queue([("tokens", "int32", (4, tq.upto(6)))])
    assert [v.name for v in varlen.dequeue(lengths=True)] == ["tokens", "tokens_lengths"]
