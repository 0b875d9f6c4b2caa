"""Tokenizers of tools/mimo-prep: a sentencepiece `tokenizer.model` (Debian's
python3-sentencepiece) and a Hugging Face `tokenizer.json` with a byte-level
BPE model (GPT-2, Llama 3, Qwen2), implemented here since transformers and
tokenizers are not packaged.

Byte-level BPE, as the tokenizers library computes it:
1. the added tokens (tokenizer.json's "added_tokens", e.g. <|eot_id|>) are
   cut out of the text first and become their own ids;
2. the rest is pre-tokenized: each "Split" pre-tokenizer's regex (\\p{L}
   and friends, so Python's `regex` module: python3-regex) isolates pieces,
   then "ByteLevel" maps each piece's UTF-8 bytes to GPT-2's printable
   characters (with "add_prefix_space", a space first; with "use_regex",
   GPT-2's own pattern);
3. each piece is merged by BPE: the adjacent pair of lowest rank in
   "merges" is joined everywhere, again until no pair has a rank;
4. the symbols are looked up in "vocab".
"""
import json

import regex

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"
                r"|\s+(?!\S)|\s+")


def bytes_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    chars, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


class TokenizerError(Exception):
    pass


class ByteLevelBpe:
    def __init__(self, path):
        try:
            doc = json.load(open(path, encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise TokenizerError(f"{path}: cannot read it: {e}")
        model = doc.get("model") or {}
        if model.get("type") != "BPE":
            raise TokenizerError(
                f"{path}: /model/type is {model.get('type')!r}; mimo-prep reads "
                "byte-level BPE tokenizer.json files (GPT-2, Llama 3, Qwen2) and "
                "sentencepiece .model files")
        self.vocab = model.get("vocab") or {}
        merges = model.get("merges") or []
        self.ranks = {}
        for i, m in enumerate(merges):
            pair = tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m)
            if len(pair) != 2:
                raise TokenizerError(f"{path}: /model/merges/{i} is not a pair")
            self.ranks.setdefault(pair, i)
        self.added = {t["content"]: t["id"] for t in doc.get("added_tokens") or []
                      if isinstance(t, dict) and "content" in t and "id" in t}
        self.byte_map = bytes_to_unicode()
        self.patterns, self.prefix_space = [], False
        pre = doc.get("pre_tokenizer") or {}
        steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
        byte_level = False
        for step in steps:
            kind = step.get("type")
            if kind == "Split":
                pattern = step.get("pattern", {})
                text = pattern.get("Regex") or regex.escape(pattern.get("String", ""))
                self.patterns.append(regex.compile(text))
            elif kind == "ByteLevel":
                byte_level = True
                self.prefix_space = bool(step.get("add_prefix_space", False))
                if step.get("use_regex", True):
                    self.patterns.append(regex.compile(GPT2_PATTERN))
            elif kind is not None:
                raise TokenizerError(
                    f"{path}: pre_tokenizer {kind!r} is not one mimo-prep computes "
                    "(Split and ByteLevel)")
        if not byte_level:
            raise TokenizerError(f"{path}: no ByteLevel pre-tokenizer: not a "
                                 "byte-level BPE tokenizer")
        if self.added:
            self.added_re = regex.compile(
                "|".join(regex.escape(t) for t in sorted(self.added, key=len, reverse=True)))
        else:
            self.added_re = None
        self.cache = {}
        self.size = max(list(self.vocab.values()) + list(self.added.values()) + [-1]) + 1

    def token_id(self, text):
        """The id of an added token or vocabulary entry, or None."""
        if text in self.added:
            return self.added[text]
        return self.vocab.get(text)

    def _pieces(self, text):
        """The pieces of each regex in turn; text between matches is a piece
        of its own (the "Isolated" behaviour)."""
        pieces = [text]
        for pattern in self.patterns:
            out = []
            for p in pieces:
                at = 0
                for m in pattern.finditer(p):
                    if m.start() > at:
                        out.append(p[at:m.start()])
                    if m.end() > m.start():
                        out.append(m.group(0))
                    at = m.end()
                if at < len(p):
                    out.append(p[at:])
            pieces = out
        return pieces

    def _bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        symbols = [self.byte_map[b] for b in piece.encode("utf-8")]
        while len(symbols) > 1:
            best, at = None, -1
            for i in range(len(symbols) - 1):
                rank = self.ranks.get((symbols[i], symbols[i + 1]))
                if rank is not None and (best is None or rank < best):
                    best, at = rank, i
            if best is None:
                break
            pair, merged, i = (symbols[at], symbols[at + 1]), [], 0
            while i < len(symbols):
                if i < len(symbols) - 1 and (symbols[i], symbols[i + 1]) == pair:
                    merged.append(pair[0] + pair[1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        ids = []
        for s in symbols:
            if s not in self.vocab:
                raise TokenizerError(f"the symbol {s!r} is not in the vocabulary")
            ids.append(self.vocab[s])
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        out, parts, at = [], [], 0
        if self.added_re is not None:
            for m in self.added_re.finditer(text):
                parts.append((text[at:m.start()], False))
                parts.append((m.group(0), True))
                at = m.end()
        parts.append((text[at:], False))
        first = True
        for part, special in parts:
            if special:
                out.append(self.added[part])
                continue
            if not part:
                continue
            if first and self.prefix_space and not part.startswith(" "):
                part = " " + part
            first = False
            for piece in self._pieces(part):
                out += self._bpe(piece)
        return out


class SentencePiece:
    def __init__(self, path):
        try:
            import sentencepiece
        except ImportError:
            raise TokenizerError("sentencepiece is not installed (Debian: "
                                 "python3-sentencepiece)")
        self.sp = sentencepiece.SentencePieceProcessor()
        try:
            self.sp.Load(path)
        except (OSError, RuntimeError) as e:
            raise TokenizerError(f"{path}: cannot load it: {e}")
        self.size = self.sp.GetPieceSize()

    def token_id(self, text):
        i = self.sp.PieceToId(text)
        return None if i == self.sp.unk_id() and text != self.sp.IdToPiece(i) else i

    def encode(self, text):
        return list(self.sp.EncodeAsIds(text))

    def bos(self):
        return self.sp.bos_id() if self.sp.bos_id() >= 0 else None

    def eos(self):
        return self.sp.eos_id() if self.sp.eos_id() >= 0 else None


def load(path):
    if path.endswith(".json"):
        return ByteLevelBpe(path)
    return SentencePiece(path)


def special_ids(tok, bos_text, eos_text):
    """(bos, eos) ids: given by name, else the tokenizer's own (sentencepiece)
    or the usual names (<|begin_of_text|>, <s>; <|eot_id|>, <|im_end|>,
    <|endoftext|>, </s>)."""
    def named(text, what):
        i = tok.token_id(text)
        if i is None:
            raise TokenizerError(f"--{what} {text!r} is not a token of the tokenizer")
        return i
    if bos_text is not None:
        bos = named(bos_text, "bos") if bos_text else None
    elif isinstance(tok, SentencePiece):
        bos = tok.bos()
    else:
        bos = next((tok.token_id(t) for t in ("<|begin_of_text|>", "<s>")
                    if tok.token_id(t) is not None), None)
    if eos_text is not None:
        eos = named(eos_text, "eos") if eos_text else None
    elif isinstance(tok, SentencePiece):
        eos = tok.eos()
    else:
        eos = next((tok.token_id(t) for t in ("<|eot_id|>", "<|im_end|>",
                                              "<|endoftext|>", "</s>")
                    if tok.token_id(t) is not None), None)
    return bos, eos
