"""Getting the kernel module out of a model's reply."""

from __future__ import annotations

import pytest

from ksearch.errors import ModelReplyError
from ksearch.llm.parsing import extract_code

KERNEL = "import torch\n\n\ndef kernel(x):\n    return x.clone()\n"


def test_takes_the_fenced_python_block() -> None:
    reply = f"Here is the kernel:\n\n```python\n{KERNEL}```\n\nIt clones the input."
    assert extract_code(reply, "triton") == KERNEL


@pytest.mark.parametrize("tag", ["py", "triton", "Python", "", "python3"])
def test_accepts_python_like_and_untagged_fences(tag: str) -> None:
    assert extract_code(f"```{tag}\n{KERNEL}```", "triton") == KERNEL


def test_prefers_the_largest_python_block() -> None:
    usage = "y = kernel(x)\n"
    reply = f"Usage:\n```python\n{usage}```\nFull module:\n```python\n{KERNEL}```\n```bash\n{'echo hi; ' * 50}\n```"
    assert extract_code(reply, "triton") == KERNEL


def test_tilde_fences_indented_fences_and_unclosed_fences() -> None:
    assert extract_code(f"~~~python\n{KERNEL}~~~\n", "triton") == KERNEL
    body = "".join(f"    {line}\n" for line in KERNEL.splitlines())
    indented = f"1. The code:\n\n    ```python\n{body}    ```\n"
    assert extract_code(indented, "triton") == KERNEL
    assert extract_code(f"```python\n{KERNEL}", "triton") == KERNEL  # the reply was cut off before the closing fence


def test_without_fences_the_whole_reply_is_the_code() -> None:
    assert extract_code(f"\n\n{KERNEL}\n\n", "triton") == KERNEL


def test_fenced_syntax_errors_are_kept_for_the_compile_step() -> None:
    reply = "```python\ndef kernel(x)\n    return x\n```"
    assert extract_code(reply, "triton") == "def kernel(x)\n    return x\n"


def test_unfenced_prose_is_not_code() -> None:
    reply = "Sure! I will write the kernel now."
    with pytest.raises(ModelReplyError, match="does not parse") as info:
        extract_code(reply, "triton")
    assert info.value.last_reply == reply


@pytest.mark.parametrize("reply", ["", "   \n", "```python\n\n```"])
def test_empty_replies_are_errors(reply: str) -> None:
    with pytest.raises(ModelReplyError, match="no code"):
        extract_code(reply, "triton")


def test_blocks_in_other_languages_only_are_errors() -> None:
    with pytest.raises(ModelReplyError, match="bash"):
        extract_code("```bash\npip install triton\n```", "triton")
