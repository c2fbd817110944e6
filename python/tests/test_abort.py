"""Ctrl-C (SIGINT) during generate raises KeyboardInterrupt between engine steps and aborts the call's
requests; the engine then runs the next call as if nothing had happened. The GIL is free while it runs."""

import os
import signal
import threading
import time

import pytest

from nanovllm import SamplingParams

LONG = SamplingParams(temperature=0, max_tokens=20000, ignore_eos=True)  # far longer than the 0.5 s before the signal


def interrupt_after(seconds: float) -> threading.Timer:
    t = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    return t


def test_ctrl_c_aborts_generate(llm):
    short = SamplingParams(temperature=0, max_tokens=8)
    expected = llm.generate(["abc", "def"], short, use_tqdm=False)
    before = llm._engine.num_generated_tokens
    timer = interrupt_after(0.5)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        llm.generate(["long one", "long two"], LONG, use_tqdm=False)
    timer.join()
    assert time.monotonic() - start < 30  # stopped early, not after 2 x 20000 tokens
    assert 0 < llm._engine.num_generated_tokens - before < 2 * 20000
    after = llm.generate(["abc", "def"], short, use_tqdm=False)
    assert [o.token_ids for o in after] == [o.token_ids for o in expected]


def test_ctrl_c_aborts_stream(llm):
    timer = interrupt_after(0.5)
    seen = 0
    with pytest.raises(KeyboardInterrupt):
        for d in llm.stream(["long one"], LONG):
            seen += len(d.token_ids)
    timer.join()
    assert 0 < seen < 20000
    assert len(llm.generate("x", SamplingParams(max_tokens=3), use_tqdm=False)[0].token_ids) == 3


def test_gil_released_while_generating(llm):
    done = threading.Event()
    result = []

    def run():
        result.append(llm.generate(["count"], SamplingParams(temperature=0, max_tokens=500, ignore_eos=True),
                                   use_tqdm=False))
        done.set()

    worker = threading.Thread(target=run)
    ticks = 0
    worker.start()
    while not done.is_set():  # this thread keeps running Python while the engine works
        ticks += 1
        time.sleep(0.001)
    worker.join()
    assert len(result[0][0].token_ids) == 500
    assert ticks > 10


def test_progress_callback_counts_requests(llm, monkeypatch):
    import nanovllm.llm as llm_module

    counts = []

    class Bar:
        def update(self, n):
            counts.append(n)

        def close(self):
            counts.append("closed")

    monkeypatch.setattr(llm_module, "progress_bar", lambda total, desc="Generating": Bar())
    llm.generate(["a", "b", "c"], [SamplingParams(max_tokens=m) for m in (1, 3, 5)])
    assert sum(c for c in counts if c != "closed") == 3 and counts[-1] == "closed"
