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

A tokenizer.json is checked whole when it is loaded: a value of the wrong
type or a missing key is a TokenizerError naming the file and the JSON
pointer; an id is a JSON integer from 0 (not -1, not 257.9); an added token
is not empty. The regexes of one encode() call get REGEX_SECONDS in all: a
pattern that backtracks without end (say "(a+)+$") raises PatternTimeout,
naming the file and the pattern.
"""
import re
import time

import prep_inputs
from prep_inputs import is_int, kind, pointer

try:
    import regex
except ImportError:  # reported when a tokenizer.json is read
    regex = None

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"
                r"|\s+(?!\S)|\s+")
MAX_TOKENIZER_BYTES = 1 << 28  # 256 MiB (Llama 3's tokenizer.json is 9 MB)
MAX_PATTERN = 1 << 16  # characters of a Split regex
MAX_ID = (1 << 31) - 1  # int32, the widest ids a dataset holds
REGEX_SECONDS = 5.0  # the pre-tokenizers' time for one encode() call
CACHE_PIECES = 1 << 17  # pieces whose merges are remembered


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


class PatternTimeout(Exception):
    """A pre-tokenizer regex ran out of time. The tokenizer is at fault, not
    the text, so it is no TokenizerError (which skips one record)."""


def shown(text, n=100):
    """repr(text), cut to about n characters."""
    r = repr(text)
    return r if len(r) <= n else r[:n] + "..."


class Checked:
    """A tokenizer.json's values, each got with its JSON pointer: one of the
    wrong type or missing is a TokenizerError naming the file and it."""

    def __init__(self, path):
        self.path = path

    def error(self, keys, message):
        return TokenizerError(f"{self.path}: {pointer(*keys) or 'the document'}: {message}")

    def get(self, obj, keys, types, what, default=KeyError):
        """obj[keys[-1]], of one of `types` (described as `what`)."""
        key = keys[-1]
        if key not in obj:
            if default is KeyError:
                raise self.error(keys, f"missing; expected {what}")
            return default
        value = obj[key]
        types = types if isinstance(types, tuple) else (types,)
        if value is None and default is not KeyError:
            return default
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise self.error(keys, f"expected {what}, not {kind(value)}")
        return value

    def token_id(self, keys, value, token):
        if not is_int(value) or not 0 <= value <= MAX_ID:
            raise self.error(keys, f"the id of the token {shown(token)} is {kind(value)}; "
                             f"ids are JSON integers from 0 up, below the model's "
                             f"vocab_size: give it its id (or remove the token)")
        return value


class ByteLevelBpe:
    def __init__(self, path):
        if regex is None:
            raise TokenizerError(prep_inputs.missing_package("regex"))
        self.path = path
        try:
            doc = prep_inputs.read_json(path, MAX_TOKENIZER_BYTES, "the tokenizer")
        except prep_inputs.InputError as e:
            raise TokenizerError(str(e))
        c = Checked(path)
        if not isinstance(doc, dict):
            raise c.error((), f"expected an object (a tokenizer.json), not {kind(doc)}")
        model = c.get(doc, ("model",), dict, "an object")
        if model.get("type") != "BPE":
            raise TokenizerError(
                f"{path}: /model/type is {shown(model.get('type'))}; mimo-prep reads "
                "byte-level BPE tokenizer.json files (GPT-2, Llama 3, Qwen2) and "
                "sentencepiece .model files")
        self.vocab = c.get(model, ("model", "vocab"), dict, "an object of token: id")
        for token, i in self.vocab.items():
            c.token_id(("model", "vocab", token), i, token)
        merges = c.get(model, ("model", "merges"), list, 'an array of merges ("A B")')
        self.ranks = {}
        for i, m in enumerate(merges):
            pair = (m.split(" ") if isinstance(m, str) else m if isinstance(m, list)
                    else None)
            if (pair is None or len(pair) != 2
                    or not all(isinstance(s, str) and s for s in pair)):
                raise c.error(("model", "merges", i), f'expected a merge, "A B" or '
                              f'["A", "B"], not {kind(m) if pair is None else shown(m)}')
            self.ranks.setdefault(tuple(pair), i)
        self.added = {}
        for i, t in enumerate(c.get(doc, ("added_tokens",), list, "an array", [])):
            at = ("added_tokens", i)
            if not isinstance(t, dict):
                raise c.error(at, f"expected an object (id, content), not {kind(t)}")
            content = c.get(t, at + ("content",), str, "the token's text")
            if not content:
                raise c.error(at + ("content",), f"an empty added token (id "
                              f"{t.get('id')!r}) would stand between every two "
                              "characters: remove it")
            self.added[content] = c.token_id(at + ("id",), t.get("id"), content)
        self.byte_map = bytes_to_unicode()
        self.patterns, self.prefix_space = [], False
        pre = c.get(doc, ("pre_tokenizer",), dict, "an object", {})
        if pre.get("type") == "Sequence":
            steps = [(("pre_tokenizer", "pretokenizers", i), s) for i, s in enumerate(
                c.get(pre, ("pre_tokenizer", "pretokenizers"), list, "an array"))]
        else:
            steps = [(("pre_tokenizer",), pre)]
        byte_level = False
        for at, step in steps:
            if not isinstance(step, dict):
                raise c.error(at, f"expected an object (a pre-tokenizer), not {kind(step)}")
            kind_ = c.get(step, at + ("type",), str, "a pre-tokenizer's name", None)
            if kind_ == "Split":
                self.patterns.append(self._split(c, at, step))
            elif kind_ == "ByteLevel":
                byte_level = True
                self.prefix_space = c.get(step, at + ("add_prefix_space",), bool,
                                          "true or false", False)
                if c.get(step, at + ("use_regex",), bool, "true or false", True):
                    self.patterns.append(regex.compile(GPT2_PATTERN))
            elif kind_ is not None:
                raise TokenizerError(
                    f"{path}: pre_tokenizer {kind_!r} is not one mimo-prep computes "
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
        ids = list(self.vocab.items()) + list(self.added.items())
        self.last = max(ids, key=lambda t: t[1]) if ids else None  # (token, its id)
        self.size = self.last[1] + 1 if ids else 0

    def _split(self, c, at, step):
        """A Split pre-tokenizer's compiled regex: the pieces it matches and
        the text between them are pieces of their own ("Isolated")."""
        pattern = c.get(step, at + ("pattern",), dict, 'an object ({"Regex": ...} or '
                        '{"String": ...})')
        if "Regex" in pattern:
            text = c.get(pattern, at + ("pattern", "Regex"), str, "a regex")
        elif "String" in pattern:
            text = regex.escape(c.get(pattern, at + ("pattern", "String"), str, "a string"))
        else:
            raise c.error(at + ("pattern",), 'expected {"Regex": ...} or {"String": ...}, '
                          "not an object of neither")
        behavior = c.get(step, at + ("behavior",), str, "a behaviour", "Isolated")
        if behavior != "Isolated" or c.get(step, at + ("invert",), bool,
                                           "true or false", False):
            raise c.error(at, f"a Split of behavior {behavior!r}"
                          f"{' inverted' if step.get('invert') else ''}: mimo-prep "
                          "computes \"Isolated\" (Llama 3's and Qwen2's) only")
        if len(text) > MAX_PATTERN:
            raise c.error(at + ("pattern",), f"a regex of {len(text)} characters, more "
                          f"than the {MAX_PATTERN} mimo-prep reads")
        try:
            return regex.compile(text)
        except (regex.error, RecursionError, OverflowError, ValueError) as e:
            raise c.error(at + ("pattern",), f"{shown(text)} is not a regex Python's "
                          f"regex module compiles: {e}")

    def token_id(self, text):
        """The id of an added token or vocabulary entry, or None."""
        if text in self.added:
            return self.added[text]
        return self.vocab.get(text)

    def _matches(self, pattern, text, deadline):
        """pattern's matches in text, within the deadline."""
        try:
            for m in pattern.finditer(text, timeout=max(deadline - time.monotonic(), 1e-3)):
                if time.monotonic() > deadline:
                    raise TimeoutError
                yield m
        except TimeoutError:
            raise PatternTimeout(
                f"{self.path}: the pre-tokenizer regex {shown(pattern.pattern, 200)} "
                f"took more than {REGEX_SECONDS:g} s on a text of {len(text)} "
                "characters: it backtracks without end (a nested repeat such as "
                "(a+)+); fix the pattern in the tokenizer.json")

    def _pieces(self, text, deadline):
        """The pieces of each regex in turn; text between matches is a piece
        of its own (the "Isolated" behaviour)."""
        pieces = [text]
        for pattern in self.patterns:
            out = []
            for p in pieces:
                at = 0
                for m in self._matches(pattern, p, deadline):
                    if m.start() > at:
                        out.append(p[at:m.start()])
                    if m.end() > m.start():
                        out.append(m.group(0))
                    at = m.end()
                if at < len(p):
                    out.append(p[at:])
            pieces = out
        return pieces

    def _bpe(self, piece, deadline):
        if piece in self.cache:
            return self.cache[piece]
        symbols = [self.byte_map[b] for b in piece.encode("utf-8")]
        while len(symbols) > 1:
            if time.monotonic() > deadline:
                raise TokenizerError(f"a piece of {len(piece)} characters takes more "
                                     f"than {REGEX_SECONDS:g} s to merge")
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
        ids = []  # (id, its bytes): a symbol is a character a byte
        for s in symbols:
            if s not in self.vocab:
                raise TokenizerError(f"the symbol {s!r} is not in the vocabulary")
            ids.append((self.vocab[s], len(s)))
        if len(self.cache) >= CACHE_PIECES:
            self.cache.clear()
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        return [i for i, _, _ in self.encode_offsets(text)]

    def encode_offsets(self, text):
        """[(id, begin, end)]: each token and the characters of `text` it
        stands for (an added prefix space stands for none)."""
        deadline = time.monotonic() + REGEX_SECONDS
        out, parts, at = [], [], 0
        if self.added_re is not None:
            for m in self._matches(self.added_re, text, deadline):
                parts.append((at, text[at:m.start()], False))
                parts.append((m.start(), m.group(0), True))
                at = m.end()
        parts.append((at, text[at:], False))
        first = True
        for begin, part, special in parts:
            if special:
                out.append((self.added[part], begin, begin + len(part)))
                continue
            if not part:
                continue
            floor = begin
            if first and self.prefix_space and not part.startswith(" "):
                part, begin = " " + part, begin - 1
            first = False
            for piece in self._pieces(part, deadline):
                # the character each of the piece's UTF-8 bytes belongs to
                owner = [k for k, ch in enumerate(piece)
                         for _ in range(len(ch.encode("utf-8")))]
                b = 0
                for i, n in self._bpe(piece, deadline):
                    lo, hi = begin + owner[b], begin + owner[b + n - 1] + 1
                    out.append((i, max(lo, floor), max(hi, floor)))
                    b += n
                begin += len(piece)
        return out


class SentencePiece:
    def __init__(self, path):
        try:
            sentencepiece = prep_inputs.need("sentencepiece")
            prep_inputs.regular_file(path, MAX_TOKENIZER_BYTES, "the tokenizer")
        except prep_inputs.InputError as e:
            raise TokenizerError(str(e))
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

    def cut_specials(self, added=()):
        """Has encode_offsets() take the control pieces (<s>, </s>) written
        as text, and the (text, id) pairs of `added` (tokenizer_config.json's
        added tokens), as their ids, as Hugging Face's tokenizers do with
        special tokens: --template hf, whose templates write them."""
        if not hasattr(self.sp, "EncodeAsImmutableProto"):
            raise TokenizerError("--template hf needs sentencepiece 0.1.97 or later "
                                 "(its token offsets): upgrade python3-sentencepiece")
        self.specials = {self.sp.IdToPiece(i): i for i in range(self.size)
                         if self.sp.IsControl(i) and self.sp.IdToPiece(i)}
        for text, i in added:
            self.specials.setdefault(text, i)
        self.specials_re = re.compile("|".join(
            re.escape(t) for t in sorted(self.specials, key=len, reverse=True)))

    def encode_offsets(self, text):
        """[(id, begin, end)]: each token and the characters of `text` it
        stands for."""
        specials_re = getattr(self, "specials_re", None)
        parts, at = [], 0
        for m in (specials_re.finditer(text) if specials_re and self.specials else ()):
            parts.append((at, text[at:m.start()], None))
            parts.append((m.start(), m.group(0), self.specials[m.group(0)]))
            at = m.end()
        parts.append((at, text[at:], None))
        out = []
        for begin, part, special in parts:
            if special is not None:
                out.append((special, begin, begin + len(part)))
            elif part:
                out += [(p.id, begin + p.begin, begin + p.end)
                        for p in self.sp.EncodeAsImmutableProto(part).pieces]
        return out

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
