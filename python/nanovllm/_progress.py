"""The progress bar of LLM.generate(use_tqdm=True): tqdm when installed, else a one-line counter on a terminal."""

import sys


class _Counter:
    def __init__(self, total: int, desc: str):
        self.total, self.n, self.desc = total, 0, desc
        self.enabled = sys.stderr.isatty()
        self._draw()

    def update(self, n: int) -> None:
        self.n += n
        self._draw()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")

    def _draw(self) -> None:
        if self.enabled:
            sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total}")
            sys.stderr.flush()


def progress_bar(total: int, desc: str = "Generating"):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Counter(total, desc)
    return tqdm(total=total, desc=desc, dynamic_ncols=True)
