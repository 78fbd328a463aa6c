"""LLM layer: provider specs, a real HTTP round trip through langchain-openai to a loopback server, retries,
idempotency, budgets, JSON repair and replay. No real provider is ever contacted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ksearch.errors import (
    BudgetExceededError,
    MissingApiKeyError,
    ModelReplyError,
    ProviderError,
    ReplayExhaustedError,
    UserError,
)
from ksearch.llm.client import LLMClient
from ksearch.llm.parsing import extract_json_object
from ksearch.llm.provider_errors import is_transient
from ksearch.llm.providers import is_loopback_url, make_chat_model, parse_spec
from ksearch.llm.recorder import MemoryRecorder
from ksearch.llm.replay import ReplayChatModel, ReplayEntry, ScriptedChatModel, load_replay_entries
from ksearch.llm.usage import Budget, RecordedCall, Usage
from tests.helpers.http import serving

# --------------------------------------------------------------------------------------------------------------------
# A loopback OpenAI-compatible server


@dataclass
class FakeOpenAI:
    """Scripted answers for POST /v1/chat/completions: (status, reply text) per request, the last one repeating."""

    script: list[tuple[int, str]] = field(default_factory=lambda: [(200, "hello from the server")])
    requests: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 11
    completion_tokens: int = 7
    hang_first_s: float = 0.0
    """The first request waits this long before answering (to provoke a client timeout)."""
    arrivals: int = 0
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        index = len(self.requests)
        self.requests.append(body)
        status, text = self.script[min(index, len(self.script) - 1)]
        if status != 200:
            return status, {"error": {"message": text, "type": "test_error", "code": str(status)}}
        return 200, {
            "id": f"chatcmpl-{index}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": body.get("model", "?"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
            },
        }


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path.rstrip("/") != "/v1/chat/completions":
                status, payload = 404, {"error": {"message": f"no route {self.path}"}}
            else:
                fake.arrivals += 1
                if fake.hang_first_s and fake.arrivals == 1:
                    time.sleep(fake.hang_first_s)
                status, payload = fake.answer(body)
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout test)
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as port:
        fake.port = port
        yield fake


def client_for(model: Any, **kwargs: Any) -> LLMClient:
    kwargs.setdefault("base_delay_s", 0.001)
    kwargs.setdefault("max_delay_s", 0.01)
    return LLMClient(model, MemoryRecorder(), **kwargs)


# --------------------------------------------------------------------------------------------------------------------
# Specs and provider errors


def test_parse_spec_splits_on_first_colon_and_normalises() -> None:
    assert parse_spec("openai:gpt-5.2") == ("openai", "gpt-5.2")
    assert parse_spec("ollama:qwen3:32b") == ("ollama", "qwen3:32b")
    assert parse_spec("Google:gemini-2.5-pro") == ("google_genai", "gemini-2.5-pro")


@pytest.mark.parametrize("spec", ["gpt-5.2", "openai:", ":gpt-5.2"])
def test_bad_spec_is_a_user_error_with_an_example(spec: str) -> None:
    with pytest.raises(UserError) as info:
        make_chat_model(spec)
    assert "provider:model" in str(info.value)
    assert "openai:" in info.value.hint


def test_missing_integration_package_names_the_pip_install() -> None:
    pytest.importorskip("langchain_openai")
    with pytest.raises(UserError) as info:
        make_chat_model("mistral:mistral-large")  # langchain-mistralai is not a dependency
    assert "pip install langchain-mistralai" in info.value.hint


def test_unknown_provider_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown model provider 'nosuchprovider'"):
        make_chat_model("nosuchprovider:m")


def test_missing_key_names_the_env_var() -> None:
    with pytest.raises(MissingApiKeyError) as info:
        make_chat_model("openai:gpt-5.2")
    assert "OPENAI_API_KEY" in str(info.value)
    assert "OPENAI_API_KEY" in info.value.hint and "--base-url" in info.value.hint


def test_remote_base_url_still_needs_a_key() -> None:
    with pytest.raises(MissingApiKeyError, match="OPENAI_API_KEY"):
        make_chat_model("openai:gpt-5.2", base_url="https://gateway.example.com/v1")


def test_key_from_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = make_chat_model("openai:gpt-4.1", temperature=0.3, timeout_s=12)  # gpt-5 models drop temperature
    assert model.openai_api_key.get_secret_value() == "sk-test"  # type: ignore[attr-defined]
    assert model.temperature == 0.3  # type: ignore[attr-defined]
    assert model.max_retries == 0 and model.request_timeout == 12  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://[::1]:8000/v1", True),
        ("https://api.example.com/v1", False),
        ("http://10.0.0.5:8000/v1", False),
    ],
)
def test_loopback_detection(url: str, local: bool) -> None:
    assert is_loopback_url(url) is local


def test_replay_spec_builds_a_replay_model(tmp_path: Path) -> None:
    script = tmp_path / "run.jsonl"
    script.write_text('{"reply": "a"}\n')
    model = make_chat_model(f"replay:{script}")
    assert isinstance(model, ReplayChatModel) and model.remaining == 1


# --------------------------------------------------------------------------------------------------------------------
# Real HTTP round trips through langchain-openai


def test_complete_against_local_openai_compatible_server(server: FakeOpenAI) -> None:
    model = make_chat_model("openai:test-model", base_url=server.base_url)
    client = client_for(model, budget=Budget(price_input_per_mtok=2.0, price_output_per_mtok=10.0))

    call = client.complete("planner", "run1/plan/0", "Plan the next step.", system="You plan kernels.")

    assert call.reply == "hello from the server"
    assert (call.input_tokens, call.output_tokens) == (11, 7)
    assert call.cost_usd == pytest.approx((11 * 2.0 + 7 * 10.0) / 1e6)
    assert call.model == "test-model" and call.role == "planner" and not call.replayed
    assert call.latency_s > 0
    assert client.recorder.find("run1/plan/0") == call
    assert client.usage.calls == 1 and client.usage.per_role["planner"].output_tokens == 7

    [body] = server.requests
    assert body["model"] == "test-model"
    assert body["messages"][-1] == {"role": "user", "content": "Plan the next step."}
    assert body["messages"][0]["content"] == "You plan kernels."


def test_transient_errors_are_retried(server: FakeOpenAI) -> None:
    server.script = [(429, "slow down"), (429, "slow down"), (200, "finally")]
    slept: list[float] = []
    client = client_for(make_chat_model("openai:test-model", base_url=server.base_url), sleep=slept.append)

    call = client.complete("coder", "k", "write")

    assert call.reply == "finally" and call.retries == 2
    assert len(server.requests) == 3
    assert len(slept) == 2 and slept[1] >= slept[0] * 0.5  # backed off, with jitter


def test_timeouts_are_retried(server: FakeOpenAI) -> None:
    server.hang_first_s = 0.5
    model = make_chat_model("openai:test-model", base_url=server.base_url, timeout_s=0.1)
    call = client_for(model).complete("coder", "k", "write")
    assert call.reply == "hello from the server" and call.retries == 1 and server.arrivals == 2


def test_server_errors_exhaust_retries_into_provider_error(server: FakeOpenAI) -> None:
    server.script = [(503, "overloaded")]
    client = client_for(make_chat_model("openai:test-model", base_url=server.base_url), max_attempts=3)

    with pytest.raises(ProviderError, match="failed 3 times"):
        client.complete("coder", "k", "write")
    assert len(server.requests) == 3
    assert client.recorder.find("k") is None


def test_auth_error_fails_fast(server: FakeOpenAI) -> None:
    server.script = [(401, "invalid api key")]
    client = client_for(make_chat_model("openai:test-model", base_url=server.base_url))

    with pytest.raises(UserError, match="HTTP 401"):
        client.complete("coder", "k", "write")
    assert len(server.requests) == 1


def test_bad_request_is_a_provider_error_without_retry(server: FakeOpenAI) -> None:
    server.script = [(400, "unsupported parameter: top_k")]
    client = client_for(make_chat_model("openai:test-model", base_url=server.base_url))

    with pytest.raises(ProviderError, match="HTTP 400"):
        client.complete("coder", "k", "write")
    assert len(server.requests) == 1


def test_context_overflow_is_named(server: FakeOpenAI) -> None:
    server.script = [(400, "maximum context length is 8192 tokens (context_length_exceeded)")]
    client = client_for(make_chat_model("openai:test-model", base_url=server.base_url))

    with pytest.raises(ProviderError, match="longer than test-model's context window"):
        client.complete("coder", "k", "write")
    assert len(server.requests) == 1


def test_complete_is_idempotent_by_call_key(server: FakeOpenAI) -> None:
    client = client_for(make_chat_model("openai:test-model", base_url=server.base_url))

    first = client.complete("planner", "plan/1", "Plan.")
    again = client.complete("planner", "plan/1", "Plan.")

    assert again == first
    assert len(server.requests) == 1
    assert client.usage.calls == 1


def test_transient_classification() -> None:
    class Status(Exception):
        def __init__(self, status_code: int) -> None:
            self.status_code = status_code

    assert is_transient(Status(429)) and is_transient(Status(529)) and is_transient(TimeoutError()) is False
    assert not is_transient(Status(400)) and not is_transient(Status(401))


# --------------------------------------------------------------------------------------------------------------------
# Budget


def test_budget_exceeded_raises_before_calling() -> None:
    model = ScriptedChatModel(entries=["never served"])
    spent = Usage(input_tokens=900, output_tokens=100, cost_usd=0.5, calls=3)
    client = client_for(model, budget=Budget(max_total_tokens=1000), usage_so_far=lambda: spent)

    with pytest.raises(BudgetExceededError, match="total tokens"):
        client.complete("planner", "k", "p")
    assert model.prompts == [] and model.remaining == 1


def test_budget_counts_the_clients_own_calls() -> None:
    model = ScriptedChatModel(entries=[ReplayEntry(reply="a", input_tokens=50, output_tokens=60), "b"])
    client = client_for(model, budget=Budget(max_output_tokens=60))

    client.complete("coder", "k1", "p")
    with pytest.raises(BudgetExceededError, match="output tokens"):
        client.complete("coder", "k2", "p")


def test_cost_budget_uses_prices() -> None:
    budget = Budget(max_cost_usd=1.0, price_input_per_mtok=1.0, price_output_per_mtok=2.0)
    assert budget.cost_usd(1_000_000, 0) == pytest.approx(1.0)
    assert budget.exceeded(Usage(cost_usd=0.99)) is None
    assert budget.exceeded(Usage(cost_usd=1.0)) is not None
    assert Budget().cost_usd(10, 10) is None


# --------------------------------------------------------------------------------------------------------------------
# JSON replies


class Edit(BaseModel):
    op: str
    target: int


def test_extract_json_object_variants() -> None:
    assert extract_json_object('```json\n{"op": "split", "target": 3}\n```') == {"op": "split", "target": 3}
    assert extract_json_object('Sure! {"a": {"b": "}"}} trailing') == {"a": {"b": "}"}}
    assert extract_json_object('<think>maybe {x}</think>{"a": 1}') == {"a": 1}
    assert extract_json_object('{not json} then {"a": 2}') == {"a": 2}
    with pytest.raises(ValueError, match="invalid JSON"):  # not the inner fragment of a broken object
        extract_json_object('{"edit": {"op": "x"},}')
    with pytest.raises(ValueError, match="no JSON object"):
        extract_json_object("no braces here")
    with pytest.raises(ValueError, match="never closed"):
        extract_json_object('{"a": [1, 2')
    with pytest.raises(ValueError, match="invalid JSON"):
        extract_json_object("{'a': 1}")


def test_complete_json_repairs_a_bad_reply() -> None:
    model = ScriptedChatModel(
        entries=[
            "Here you go: {op: split}",  # not JSON
            '{"op": "split", "target": "three"}',  # schema violation
            '```json\n{"op": "split", "target": 3}\n```',
        ]
    )
    client = client_for(model)

    edit, calls = client.complete_json("planner", "edit/1", "Give an edit.", Edit)

    assert edit == Edit(op="split", target=3)
    assert [c.call_key for c in calls] == ["edit/1", "edit/1#repair1", "edit/1#repair2"]
    assert [c.attempt for c in calls] == [0, 1, 2]
    assert calls[0].error is not None and "invalid JSON" in calls[0].error
    assert calls[1].error is not None and "target" in calls[1].error
    assert calls[2].error is None
    assert all(client.recorder.find(c.call_key) == c for c in calls)
    assert model.prompts[0] == "Give an edit."
    repair = model.prompts[2]
    assert repair.startswith("Give an edit.")
    assert '{"op": "split", "target": "three"}' in repair and "## Problems with your previous reply" in repair
    assert "- target:" in repair


def test_complete_json_runs_the_extra_validator() -> None:
    model = ScriptedChatModel(entries=['{"op": "split", "target": 99}', '{"op": "split", "target": 2}'])
    client = client_for(model)

    def in_tree(data: dict[str, Any]) -> list[str]:
        return [] if data["target"] < 10 else [f"target {data['target']} is not a node of the tree"]

    edit, calls = client.complete_json("planner", "e", "p", Edit, validate=in_tree)

    assert edit.target == 2 and len(calls) == 2
    assert "target 99 is not a node" in model.prompts[1]


def test_complete_json_gives_up_after_max_repairs() -> None:
    model = ScriptedChatModel(entries=["nope", "still nope", "never asked"])
    client = client_for(model)

    with pytest.raises(ModelReplyError) as info:
        client.complete_json("coder", "k", "p", Edit, max_repairs=1)

    assert info.value.attempts == 2 and info.value.last_reply == "still nope"
    assert len(info.value.calls) == 2  # type: ignore[attr-defined]
    assert model.remaining == 1
    assert client.recorder.find("k#repair1") is not None


def test_complete_json_resumes_from_recorded_attempts() -> None:
    recorder = MemoryRecorder()
    first = LLMClient(ScriptedChatModel(entries=["bad", '{"op": "x", "target": 1}']), recorder)
    first.complete_json("planner", "k", "p", Edit)

    fresh_model = ScriptedChatModel(entries=[])
    again, calls = LLMClient(fresh_model, recorder).complete_json("planner", "k", "p", Edit)

    assert again == Edit(op="x", target=1) and len(calls) == 2
    assert fresh_model.prompts == []


def test_complete_json_without_model_returns_the_dict() -> None:
    client = client_for(ScriptedChatModel(entries=['{"any": [1, 2]}']))
    data, _ = client.complete_json("planner", "k", "p")
    assert data == {"any": [1, 2]}


# --------------------------------------------------------------------------------------------------------------------
# Replay


def test_replay_serves_by_key_then_in_order() -> None:
    model = ReplayChatModel(
        entries=[
            ReplayEntry(reply="for b", call_key="b"),
            ReplayEntry(reply="first unkeyed"),
            ReplayEntry(reply="for a", call_key="a", input_tokens=5, output_tokens=3),
        ]
    )
    client = client_for(model, budget=Budget(price_input_per_mtok=100.0))

    a = client.complete("coder", "a", "p")
    assert (a.reply, a.input_tokens, a.output_tokens, a.cost_usd, a.replayed) == ("for a", 5, 3, 0.0, True)
    # no entry for the key: the next UNKEYED entry; a keyed entry never answers another call
    assert client.complete("coder", "unknown", "p").reply == "first unkeyed"
    with pytest.raises(ReplayExhaustedError, match="none for this call"):
        client.complete("coder", "c", "p")
    assert client.complete("coder", "b", "p").reply == "for b"


def test_replay_without_keys_via_invoke() -> None:
    model = ReplayChatModel(entries=["one", "two"])
    assert model.invoke("x").text == "one"
    assert model.invoke("y", call_key="zzz").text == "two"
    with pytest.raises(ReplayExhaustedError):
        model.invoke("z")


def test_scripted_model_records_prompts_and_keys() -> None:
    model = ScriptedChatModel(entries=["r"])
    client_for(model).complete("planner", "k1", "the prompt", system="sys")
    assert model.prompts == ["the prompt"] and model.call_keys == ["k1"]
    assert model.messages[0][0].content == "sys"


def test_load_replay_entries(tmp_path: Path) -> None:
    script = tmp_path / "replies.jsonl"
    script.write_text(
        '// a hand-written script\n\n{"reply": "one", "note": "plan"}\n{"reply": "two", "call_key": "k2"}\n'
    )
    entries = load_replay_entries(str(script))
    assert [(e.reply, e.call_key) for e in entries] == [("one", None), ("two", "k2")]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"reply": "ok"}\n{"reply": oops}\n', "replies.jsonl:2: not valid JSON"),
        ('// c\n["a list"]\n', "replies.jsonl:2: expected a JSON object"),
        ('{"reply": "ok"}\n\n{"call_key": "k"}\n', "replies.jsonl:3: bad replay entry (reply: Field required)"),
    ],
)
def test_load_replay_entries_errors_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    script = tmp_path / "replies.jsonl"
    script.write_text(content)
    with pytest.raises(UserError) as info:
        load_replay_entries(str(script))
    assert message in str(info.value)


def test_load_replay_entries_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read replay file"):
        load_replay_entries(str(tmp_path / "absent.jsonl"))


def test_recorded_call_round_trips_as_json() -> None:
    call = RecordedCall(call_key="k", role="coder", model="m", prompt="p", reply="r", cost_usd=None)
    assert RecordedCall.model_validate_json(call.model_dump_json()) == call
