"""Chat templates: a conversation (a list of ``{"role", "content"}`` messages) as the one prompt a language model
continues, rendered as ``transformers``' ``apply_chat_template(..., tokenize=False)`` renders it.

    template = chat_template(folder)           the folder's own, else DEFAULT_CHAT_TEMPLATE
    prompt = render_chat(template, messages, add_generation_prompt=True, bos_token="<s>", eos_token="</s>")

A folder's template is its ``chat_template.jinja`` (as ``transformers`` 5 saves it) or the ``chat_template`` of its
``tokenizer_config.json`` (``transformers`` 4; a list of named templates gives its ``"default"``). A model aiayn
trained has none, and gets :data:`DEFAULT_CHAT_TEMPLATE`, plain text its tokenizer can spell whatever it is (a
character vocabulary included):

    system: You are terse.
    user: What is the date?
    assistant:                              (the generation prompt: the model continues from here)

The template is Jinja in ``transformers``' sandbox and settings (``trim_blocks``, ``lstrip_blocks``, loop controls,
``raise_exception``, ``strftime_now``, a ``tojson`` that keeps non-ASCII and HTML characters, and the
``{% generation %}`` block that marks an assistant's text), so a Hub model's template renders here as there.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
TEMPLATE_FILE = "chat_template.jinja"  # where a run keeps its template (transformers 5 writes this name)


def chat_template(folder: str | os.PathLike) -> str:
    """The chat template of a run or Hugging Face ``folder``: its ``chat_template.jinja``, else the
    ``chat_template`` of its ``tokenizer_config.json``, else :data:`DEFAULT_CHAT_TEMPLATE`."""
    folder = Path(folder)
    if (folder / TEMPLATE_FILE).is_file():
        return (folder / TEMPLATE_FILE).read_text(encoding="utf-8")
    found = own_template(folder)
    return DEFAULT_CHAT_TEMPLATE if found is None else found


def own_template(folder: Path) -> str | None:
    """The template ``folder``'s ``tokenizer_config.json`` holds (``None``: none)."""
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return None
    template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def render_chat(template: str, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                **variables: Any) -> str:
    """The text of ``messages`` as ``template`` lays it out (``transformers``' ``apply_chat_template`` with
    ``tokenize=False``).

    Args:
        messages: ``{"role": ..., "content": ...}`` each, in order.
        add_generation_prompt: end with what starts the assistant's turn (the model continues from there).
        variables: what else the template reads: the special tokens (``bos_token``, ``eos_token``, ...).

    Raises:
        ValueError: the template raised (``raise_exception``: a role it does not take, say) or is not Jinja.
    """
    import jinja2

    try:
        compiled = _environment().from_string(template)
        return compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, **variables)
    except jinja2.TemplateError as e:
        raise ValueError(f"the chat template cannot render these messages: {e}") from None


def special_tokens(tok: Any) -> dict[str, str]:
    """The special tokens a template may read (``bos_token``, ``eos_token``, ``pad_token``, ``unk_token``), by their
    names in ``tok`` (ours: a character vocabulary's ``itos``, or a ``tokenizers`` model's ``id_to_token``)."""
    out = {}
    for role in ("bos", "eos", "pad", "unk"):
        i = getattr(tok, f"{role}_id", None)
        if i is None:
            continue
        if hasattr(tok, "itos"):
            name = tok.itos[i] if 0 <= i < len(tok.itos) else None
        else:
            inner = getattr(tok, "tokenizer", None)
            name = inner.id_to_token(i) if inner is not None and hasattr(inner, "id_to_token") else None
        if name:
            out[f"{role}_token"] = name
    return out


def _environment() -> Any:
    """``transformers``' Jinja environment for chat templates (see the module docstring)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %} ... {% endgeneration %}``: the assistant's text, rendered as it is."""

        tags = {"generation"}  # noqa: RUF012  (jinja's Extension declares it so)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda format: datetime.datetime.now().strftime(format)
    return env


__all__ = ["DEFAULT_CHAT_TEMPLATE", "TEMPLATE_FILE", "chat_template", "own_template", "render_chat",
           "special_tokens"]
