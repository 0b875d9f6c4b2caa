"""--template hf (docs/data.md): a conversation rendered with the model's
own chat template, the Jinja `chat_template` of the tokenizer's
tokenizer_config.json (or chat_template.jinja, chat_template.json beside
it), in a sandboxed Jinja environment as transformers renders it
(trim_blocks, lstrip_blocks, loop controls, raise_exception, strftime_now,
tojson, {% generation %} blocks as they are). The answers are
found by rendering turn by turn: the text an assistant message adds to the
render of the messages before it (with the generation prompt) is its
answer, end-of-turn included; that is what the loss keeps."""
import json
import os
import time

import prep_inputs
from prep_inputs import InputError

MAX_CONFIG_BYTES = 1 << 24  # a tokenizer_config.json: 16 MiB
# Where an image's (or the video's) tokens go: no template or tokenizer
# makes these characters.
IMAGE_MARK, VIDEO_MARK = "\ue000", "\ue001"


class TemplateError(Exception):
    """A record the template cannot render (the record is skipped)."""


def _text(value):
    """A tokenizer_config's token: a string, or {"content": string}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _added_tokens(config):
    """tokenizer_config.json's added tokens: [(text, id)], from its
    "added_tokens_decoder" ({"32000": {"content": "<image>", ...}})."""
    table = config.get("added_tokens_decoder")
    out = []
    for key, token in (table.items() if isinstance(table, dict) else ()):
        text = _text(token)
        if text and key.isdigit() and int(key) < 1 << 31:
            out.append((text, int(key)))
    return out


class ChatTemplate:
    def __init__(self, tokenizer_path):
        folder = os.path.dirname(os.path.abspath(tokenizer_path))
        config_path = os.path.join(folder, "tokenizer_config.json")
        config, source, template, why = {}, None, None, ""
        if os.path.isfile(config_path):
            config = prep_inputs.read_json(config_path, MAX_CONFIG_BYTES,
                                           "the tokenizer's config")
            if not isinstance(config, dict):
                raise InputError(f"{config_path}: expected a JSON object")
            template, source = config.get("chat_template"), config_path
            if isinstance(template, list):
                named = {t.get("name"): t.get("template") for t in template
                         if isinstance(t, dict)}
                template = named.get("default")
                why = (" (its list of chat templates has none named \"default\")"
                       if template is None else "")
            elif template is not None and not isinstance(template, str):
                raise InputError(f"{config_path}: /chat_template is "
                                 f"{prep_inputs.kind(template)}; expected the Jinja "
                                 "template (a string) or a list of {name, template}")
        for name in ("chat_template.jinja", "chat_template.json"):
            path = os.path.join(folder, name)
            if template is None and os.path.isfile(path):
                prep_inputs.regular_file(path, MAX_CONFIG_BYTES, "the chat template")
                if name.endswith(".jinja"):
                    with open(path, encoding="utf-8", errors="replace") as f:
                        template = f.read()
                else:
                    doc = prep_inputs.read_json(path, MAX_CONFIG_BYTES, "the chat template")
                    template = doc.get("chat_template") if isinstance(doc, dict) else None
                source = path
        if not isinstance(template, str) or not template.strip():
            raise InputError(
                f"{source or config_path}: no chat template{why} (a string "
                "\"chat_template\" in tokenizer_config.json, or chat_template.jinja "
                "beside the tokenizer); --template hf needs the model's own")
        jinja2 = prep_inputs.need("jinja2")
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise TemplateError(f"the template raised: {message}")

        class Generation(jinja2.ext.Extension):
            """{% generation %}...{% endgeneration %} (transformers marks the
            assistant's text with it): its body, as written."""
            tags = {"generation"}

            def parse(self, parser):
                next(parser.stream)
                return parser.parse_statements(("name:endgeneration",), drop_needle=True)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True,
            extensions=[jinja2.ext.loopcontrols, Generation])
        env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, \
            separators=None, sort_keys=False: json.dumps(
                x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                sort_keys=sort_keys)
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
        try:
            self.template = env.from_string(template)
        except jinja2.TemplateError as e:
            raise InputError(f"{source}: the chat template is not Jinja: "
                             f"{type(e).__name__}: {e}")
        self.source, self.config_path = source, config_path
        self.specials = {k: _text(config.get(k)) for k in
                         ("bos_token", "eos_token", "unk_token", "pad_token")}
        self.added = _added_tokens(config)
        self.jinja2 = jinja2
        try:  # a template that cannot render the plainest conversation
            self.spans([{"role": "user", "content": "Hello?"},
                        {"role": "assistant", "content": "Hello."}])
        except TemplateError as e:
            raise InputError(f"{source}: the chat template cannot render a "
                             f"question and its answer: {e}")

    def render(self, messages, add_generation_prompt=False):
        try:
            return self.template.render(messages=messages,
                                        add_generation_prompt=add_generation_prompt,
                                        **self.specials)
        except TemplateError:
            raise
        except Exception as e:  # the template's own errors
            raise TemplateError(f"{type(e).__name__}: {e}")

    def spans(self, messages):
        """(text, [(begin, end)] of the assistant answers in it)."""
        whole = self.render(messages)
        spans = []
        for k, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = self.render(messages[:k], add_generation_prompt=True)
            upto = self.render(messages[:k + 1])
            if not upto.startswith(before):
                # a generation prompt the answer's own render does not
                # repeat (say an empty thinking block): the answer begins
                # where the two part, if past the turns before it
                plain = self.render(messages[:k])
                before = os.path.commonprefix([before, upto])
                if not upto.startswith(plain) or len(before) < len(plain):
                    before = None
            if before is None or not whole.startswith(upto):
                raise TemplateError("the chat template does not render turn by "
                                    "turn (a turn's text depends on the later "
                                    "ones): the answers cannot be told apart")
            spans.append((len(before), len(upto)))
        return whole, spans
