"""``/v1/chat/completions`` and the request fields vLLM users send (``n``, ``logprobs``/``top_logprobs``, ``echo``,
``presence_penalty``/``frequency_penalty``, ``seed`` with ``n``), each through the official ``openai`` client against
a live loopback server; chat templates rendered as ``transformers``' ``apply_chat_template`` renders them; the
answers' fields compared one by one with the ``openai`` package's types (its copy of the API reference); the
log-probabilities and penalties against the model itself, computed here."""

import pytest
import torch

import aiayn
from aiayn.data.chat import DEFAULT_CHAT_TEMPLATE, chat_template, render_chat

pytestmark = pytest.mark.usefixtures("one_thread")
openai = pytest.importorskip("openai")

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1 may 2019"},
            {"role": "assistant", "content": "2019-05-01"}, {"role": "user", "content": "3 june"}]

TEMPLATES = {
    "default": DEFAULT_CHAT_TEMPLATE,
    "chatml": ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
               "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
               "{% endif %}"),
    "llama-2-like": ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'tool' %}"
                     "{{ raise_exception('no tools') }}{% endif %}{% if loop.index0 == 0 %}{% continue %}{% endif %}"
                     "  {% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim }}"
                     "{% endgeneration %}{{ eos_token }}{% else %}[INST] {{ message['content'] | tojson }} [/INST]"
                     "{% endif %}\n{% endfor %}"),
}


def client_of(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def fields_of_reference(got, model_type, where="answer"):
    """Every field of ``got`` (a dict from the server) is a field of the ``openai`` type (recursively), and the
    type's required fields are all there: the API reference's shape, field by field."""
    fields = model_type.model_fields
    assert set(got) <= set(fields), f"{where}: {sorted(set(got) - set(fields))} are not in {model_type.__name__}"
    required = {k for k, f in fields.items() if f.is_required()}
    assert required <= set(got), f"{where}: {sorted(required - set(got))} of {model_type.__name__} are missing"
    for key, value in got.items():
        kinds = [t for t in _types(fields[key].annotation) if isinstance(t, type) and hasattr(t, "model_fields")]
        if not kinds or value is None:
            continue
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict):
                fields_of_reference(item, kinds[0], f"{where}.{key}")


def _types(annotation):
    import typing

    args = typing.get_args(annotation)
    return [annotation] if not args else [t for a in args for t in _types(a)]


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_chat_template_renders_as_transformers_apply_chat_template(name):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<s>": 0, "</s>": 1,
                                                                                              "<unk>": 2},
                                                                                             unk_token="<unk>")),
                                               bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tok.chat_template = TEMPLATES[name]
    for generation_prompt in (True, False):
        want = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=generation_prompt)
        got = render_chat(TEMPLATES[name], MESSAGES, add_generation_prompt=generation_prompt, bos_token="<s>",
                          eos_token="</s>")
        assert got == want
    if name == "llama-2-like":  # the template's own refusal, named
        with pytest.raises(ValueError, match="no tools"):
            render_chat(TEMPLATES[name], [*MESSAGES, {"role": "tool", "content": "x"}], bos_token="<s>", eos_token="")


def test_a_folder_s_template_is_its_file_then_its_tokenizer_config_then_the_default(tmp_path):
    import json

    assert chat_template(tmp_path) == DEFAULT_CHAT_TEMPLATE
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}))
    assert chat_template(tmp_path) == "D"
    (tmp_path / "chat_template.jinja").write_text("J")
    assert chat_template(tmp_path) == "J"
    assert render_chat(DEFAULT_CHAT_TEMPLATE, MESSAGES[:2]) == "system: be brief\nuser: 1 may 2019\nassistant:"


def test_chat_completions_answer_the_rendered_prompt_streamed_or_not(runs, serve):
    from tests.serve.test_server import greedy_text

    p = aiayn.pipeline(runs["lm"], device="cpu")
    prompt = render_chat(DEFAULT_CHAT_TEMPLATE, MESSAGES)
    want = greedy_text(p, prompt, 10)
    with serve(p) as (url, _):
        client = client_of(url)
        done = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=10, temperature=0)
        assert done.object == "chat.completion" and done.choices[0].message.role == "assistant"
        assert done.choices[0].message.content == want
        assert done.usage.prompt_tokens == len(p.parts["tok"].encode(prompt))
        parts = [{"type": "text", "text": "1 may "}, {"type": "text", "text": "2019"}]  # content as text parts
        assert client.chat.completions.create(
            model="tiny", messages=[*MESSAGES[:1], {"role": "user", "content": parts}, *MESSAGES[2:]],
            max_completion_tokens=10, temperature=0).choices[0].message.content == want
        chunks = list(client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=10, temperature=0,
                                                     stream=True, stream_options={"include_usage": True}))
        assert chunks[0].object == "chat.completion.chunk" and chunks[0].choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == done.choices[0].finish_reason
        assert chunks[-1].usage.total_tokens == done.usage.total_tokens
        raw = client.chat.completions.with_raw_response.create(model="tiny", messages=MESSAGES, max_tokens=4,
                                                               temperature=0, logprobs=True, top_logprobs=2)
        fields_of_reference(raw.http_response.json(), openai.types.chat.ChatCompletion)
        import json

        import httpx

        for path, body, kind in (("chat/completions", {"messages": MESSAGES, "logprobs": True, "top_logprobs": 1},
                                  openai.types.chat.ChatCompletionChunk),
                                 ("completions", {"prompt": "1 May", "logprobs": 1, "echo": True},
                                  openai.types.Completion)):
            sent = httpx.post(f"{url}/v1/{path}", json={**body, "max_tokens": 4, "temperature": 0, "stream": True,
                                                        "stream_options": {"include_usage": True}}, timeout=60).text
            events = [e.removeprefix("data: ") for e in sent.split("\n\n") if e.startswith("data: ")]
            assert events[-1] == "[DONE]" and len(events) > 3
            for event in events[:-1]:  # every chunk, the usage's included
                fields_of_reference(json.loads(event), kind, f"a {path} chunk")
        for bad, field in (({"logit_bias": {"5": 10}}, "logit_bias"),
                           ({"response_format": {"type": "json_object"}}, "response_format"),
                           ({"top_logprobs": 2}, "top_logprobs"),
                           ({"messages": [{"role": "wizard", "content": "x"}]}, r"messages\[0\].role")):
            with pytest.raises(openai.BadRequestError, match=field):
                client.chat.completions.create(**{"model": "tiny", "messages": MESSAGES, "max_tokens": 2, **bad})


def test_n_choices_each_seeded_and_the_prompt_counted_once(runs, serve):
    p = aiayn.pipeline(runs["lm"], device="cpu")
    with serve(p) as (url, _):
        client = client_of(url)
        three = client.completions.create(model="tiny", prompt="1 May", max_tokens=8, temperature=1.0, n=3, seed=11)
        again = client.completions.create(model="tiny", prompt="1 May", max_tokens=8, temperature=1.0, n=3, seed=11)
        texts = [c.text for c in sorted(three.choices, key=lambda c: c.index)]
        assert texts == [c.text for c in sorted(again.choices, key=lambda c: c.index)] and len(set(texts)) > 1
        alone = [client.completions.create(model="tiny", prompt="1 May", max_tokens=8, temperature=1.0,
                                           seed=11 + j).choices[0].text for j in range(3)]
        assert alone == texts  # choice j draws from seed + j
        assert three.usage.prompt_tokens == len(p.parts["tok"].encode("1 May"))
        two = client.completions.create(model="tiny", prompt=["1 May", "x"], max_tokens=3, temperature=0, n=2)
        assert sorted(c.index for c in two.choices) == [0, 1, 2, 3]  # prompt i's j-th is i * n + j
        by = {c.index: c.text for c in two.choices}
        assert by[0] == by[1] and by[2] == by[3]  # greedy: a prompt's n are one
        chat = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6, temperature=1.0, n=2,
                                              seed=3)
        assert sorted(c.index for c in chat.choices) == [0, 1]
        with pytest.raises(openai.BadRequestError, match=r"n must be"):
            client.completions.create(model="tiny", prompt="x", max_tokens=2, n=0)


def test_logprobs_and_echo_are_the_model_s_own_log_probabilities(runs, serve):
    p = aiayn.pipeline(runs["lm"], device="cpu")
    tok, model = p.parts["tok"], p.model
    with serve(p) as (url, _):
        client = client_of(url)
        raw = client.completions.with_raw_response.create(model="tiny", prompt="1 May", max_tokens=6, temperature=0,
                                                          logprobs=2, echo=True)
        body = raw.http_response.json()
        fields_of_reference(body, openai.types.Completion)
        choice = raw.parse().choices[0]
        lp = choice.logprobs
        prompt = tok.encode("1 May")
        assert choice.text.startswith("1 May")
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # nothing predicts the first token
        ids = torch.tensor([prompt])
        with torch.no_grad():
            for _ in range(6):  # greedy, here, as the server decoded (temperature 0)
                nxt = model(ids)[0, -1].argmax()
                if int(nxt) == tok.eos_id:
                    break
                ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
            logp = model(ids)[0].log_softmax(-1)  # (T, V): the model's own distribution, computed here
        expected = [float(logp[t - 1, ids[0, t]]) for t in range(1, ids.size(1))]
        assert lp.token_logprobs[1:] == pytest.approx(expected, abs=1e-4)
        for t, top in enumerate(lp.top_logprobs[len(prompt):], start=len(prompt)):  # greedy: the chosen is the best
            assert len(top) == 2 and max(top.values()) == pytest.approx(lp.token_logprobs[t], abs=1e-5)
        assert "".join(lp.tokens) == choice.text and lp.text_offset[1] == len(lp.tokens[0])
        chat = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=5, temperature=0,
                                              logprobs=True, top_logprobs=3)
        content = chat.choices[0].logprobs.content
        assert "".join(e.token for e in content) == chat.choices[0].message.content
        assert all(len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-5)
                   and bytes(e.bytes).decode() == e.token for e in content)
        chunks = list(client.completions.create(model="tiny", prompt="1 May", max_tokens=6, temperature=0,
                                                logprobs=1, stream=True))
        streamed = [x for c in chunks if c.choices and c.choices[0].logprobs for x in
                    c.choices[0].logprobs.token_logprobs if x is not None]
        assert streamed == pytest.approx(lp.token_logprobs[len(prompt):], abs=1e-5)


def test_presence_and_frequency_penalties_are_openai_s_definitions(runs, serve):
    p = aiayn.pipeline(runs["lm"], device="cpu")
    tok, model = p.parts["tok"], p.model
    prompt = tok.encode("1 May")

    def penalized(presence, frequency, n=12):  # OpenAI's formula, on the model here, one token at a time
        ids, counts = list(prompt), {}
        for _ in range(n):
            with torch.no_grad():
                logits = model(torch.tensor([ids]))[0, -1].clone()
            for t, c in counts.items():
                logits[t] -= c * frequency + (c > 0) * presence
            nxt = int(logits.argmax())
            if nxt == tok.eos_id:
                break
            counts[nxt] = counts.get(nxt, 0) + 1
            ids.append(nxt)
        return tok.decode(ids[len(prompt):])

    with serve(p) as (url, _):
        client = client_of(url)
        for presence, frequency in ((0.0, 0.0), (1.5, 0.0), (0.0, 2.0), (-1.0, 0.5)):
            got = client.completions.create(model="tiny", prompt="1 May", max_tokens=12, temperature=0,
                                            presence_penalty=presence, frequency_penalty=frequency).choices[0].text
            assert got == penalized(presence, frequency), (presence, frequency)
        assert penalized(0.0, 2.0) != penalized(0.0, 0.0)  # the penalty changed the text here: the test can fail
        with pytest.raises(openai.BadRequestError, match="presence_penalty"):
            client.completions.create(model="tiny", prompt="x", max_tokens=2, presence_penalty=3)


def test_an_exported_language_model_carries_the_template_transformers_then_applies(runs, tmp_path):
    transformers = pytest.importorskip("transformers")
    from aiayn.convert.folder import convert

    out = aiayn.to_hf(runs["lm"], tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True) == render_chat(
        DEFAULT_CHAT_TEMPLATE, MESSAGES)
    # a Hugging Face folder's own template comes with it into the run, and serving reads it from there
    config = tmp_path / "hf" / "tokenizer_config.json"
    import json

    config.write_text(json.dumps({**json.loads(config.read_text()), "chat_template": TEMPLATES["chatml"]}))
    run = convert(out, tmp_path / "run")
    assert chat_template(run) == TEMPLATES["chatml"] == (run / "chat_template.jinja").read_text()
