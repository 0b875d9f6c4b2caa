"""The PyTorch models of tests/e2e/twin.py, with no code of mimo's.

Twin: a Llama-style causal language model with Hugging Face's semantics
(RMSNorm, grouped-query attention as repeat_kv, rotate-half RoPE with the
llama3 rescaling, SwiGLU, an optional tied head and q, k, v biases), in
float64. VisionTwin: a CLIP-style vision tower as LLaVA takes it. Their
sizes are the constants below, which twin.py's models use too.
"""
import math

import torch

# The language model: small enough that a step takes well under a second.
VOCAB, HIDDEN, LAYERS, HEADS, FFN = 96, 64, 4, 4, 128

# --------------------------------------------------------------------------
# The twin: Hugging Face Llama semantics, float64.


def inv_freq(d, theta, scaling):
    """RoPE's inverse frequencies, rescaled like HF's
    _compute_llama3_parameters when `scaling` is given."""
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    if scaling is None:
        return inv
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    orig = scaling["original_max_position_embeddings"]
    low_freq_wavelen = orig / low
    high_freq_wavelen = orig / high
    wavelen = 2 * math.pi / inv
    out = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, out)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Twin:
    """A LlamaForCausalLM: weights as torch.nn.Linear holds them, [out, in]."""

    def __init__(self, cfg, seed):
        self.cfg = cfg
        g = torch.Generator().manual_seed(seed)
        d = HIDDEN // HEADS
        kv = cfg["groups"] * d

        dtype = cfg.get("hf", {}).get("dtype", "F32")

        def uniform(shape, scale, offset=0.0):
            w = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1)
            # Rounded as the weights are written: mimo starts from exactly
            # these values.
            w = w * scale + offset
            if dtype == "BF16":
                return w.to(torch.bfloat16).double()
            if dtype == "F16":
                return w.half().double()
            return w.float().double()

        def norm():
            return uniform((HIDDEN,), 0.2, 1.0)

        p = {}
        # Small embeddings: mean(x^2) ~ 1e-4, so the norms' eps matters.
        # Tied, the embedding is the head too: large enough for sharp logits.
        p["embed_tokens"] = uniform((VOCAB, HIDDEN),
                                    1.0 if cfg.get("tied") else 0.02)
        for l in range(LAYERS):
            s = 1 / math.sqrt(HIDDEN)
            p[f"layers.{l}.input_layernorm"] = norm()
            # Larger q and k: sharp, position-dependent attention.
            p[f"layers.{l}.q_proj"] = uniform((HIDDEN, HIDDEN), 4 * s)
            p[f"layers.{l}.k_proj"] = uniform((kv, HIDDEN), 4 * s)
            p[f"layers.{l}.v_proj"] = uniform((kv, HIDDEN), s)
            if cfg.get("qkv_bias"):
                p[f"layers.{l}.q_bias"] = uniform((HIDDEN,), 1.0)
                p[f"layers.{l}.k_bias"] = uniform((kv,), 1.0)
                p[f"layers.{l}.v_bias"] = uniform((kv,), 1.0)
            p[f"layers.{l}.o_proj"] = uniform((HIDDEN, HIDDEN), s)
            p[f"layers.{l}.post_attention_layernorm"] = norm()
            p[f"layers.{l}.gate_proj"] = uniform((FFN, HIDDEN), s)
            p[f"layers.{l}.up_proj"] = uniform((FFN, HIDDEN), s)
            p[f"layers.{l}.down_proj"] = uniform((HIDDEN, FFN), 1 / math.sqrt(FFN))
        p["norm"] = norm()
        if not cfg.get("tied"):
            p["lm_head"] = uniform((VOCAB, HIDDEN), 2 / math.sqrt(HIDDEN))
        self.params = p

    def mimo_name(self, name):
        """mimo's local name (docs/model.md) of a twin parameter."""
        rename = {"embed_tokens": "embedding", "norm": "final_norm",
                  "lm_head": "head", "input_layernorm": "attn_norm",
                  "post_attention_layernorm": "mlp_norm", "q_proj": "wq",
                  "k_proj": "wk", "v_proj": "wv", "o_proj": "wo",
                  "gate_proj": "gate", "up_proj": "up", "down_proj": "down",
                  "q_bias": "bq", "k_bias": "bk", "v_bias": "bv"}
        parts = name.split(".")
        parts[-1] = rename[parts[-1]]
        return ".".join(parts)

    def mimo_tensor(self, name, t):
        """The tensor as a mimo checkpoint stores it: a linear layer's weight
        [in, out] (the transpose of torch's), the embedding [V, H], norms
        [H]."""
        if name == "embed_tokens" or t.dim() == 1:
            return t
        return t.t()

    def forward_sample(self, ids, p, kv_map=None, inv=None):
        """The logits of one sample of token ids (HF's repeat_kv: query
        head i reads key/value head i // (n / G) unless `kv_map` says)."""
        x = p["embed_tokens"][torch.tensor(ids)]
        return self.forward_embedded(x, p, kv_map, inv)

    def forward_embedded(self, x, p=None, kv_map=None, inv=None):
        """The layers, final norm and head over input rows x [ell, H]."""
        cfg = self.cfg
        p = self.params if p is None else p
        n, G, d = HEADS, cfg["groups"], HIDDEN // HEADS
        ell = x.shape[0]
        eps = cfg["eps"]
        if inv is None:
            inv = inv_freq(d, cfg["theta"], cfg["scaling"])
        pos = torch.arange(ell, dtype=torch.float64)
        freqs = torch.outer(pos, inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        causal = torch.ones(ell, ell, dtype=torch.bool).tril()
        if kv_map is None:
            kv_map = [i // (n // G) for i in range(n)]
        for l in range(LAYERS):
            w = lambda k: p[f"layers.{l}.{k}"]
            a = rms_norm(x, w("input_layernorm"), eps)
            q, k, v = (a @ w("q_proj").t(), a @ w("k_proj").t(),
                       a @ w("v_proj").t())
            if cfg.get("qkv_bias"):
                q, k, v = q + w("q_bias"), k + w("k_bias"), v + w("v_bias")
            q = q.view(ell, n, d).transpose(0, 1)
            k = k.view(ell, G, d).transpose(0, 1)
            v = v.view(ell, G, d).transpose(0, 1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k, v = k[kv_map], v[kv_map]
            scores = q @ k.transpose(1, 2) / math.sqrt(d)
            scores = scores.masked_fill(~causal, float("-inf"))
            o = torch.softmax(scores, dim=-1) @ v
            x = x + o.transpose(0, 1).reshape(ell, n * d) @ w("o_proj").t()
            a = rms_norm(x, w("post_attention_layernorm"), eps)
            gate = a @ w("gate_proj").t()
            up = a @ w("up_proj").t()
            x = x + (torch.nn.functional.silu(gate) * up) @ w("down_proj").t()
        head = p["embed_tokens"] if cfg.get("tied") else p["lm_head"]
        logits = rms_norm(x, p["norm"], eps) @ head.t()
        return logits

    def loss(self, batch, p=None, masks=None, **kw):
        """docs/model.md's Loss: next-token cross-entropy summed over every
        counted position (s + 1 < length) of the global batch, divided by
        their count. `masks` (docs/data.md loss_mask, Hugging Face's
        labels = -100): token i with mask 0 is no target."""
        p = self.params if p is None else p
        total, count = 0.0, 0
        for b, ids in enumerate(batch):
            logits = self.forward_sample(ids, p, **kw)
            target = torch.tensor(ids[1:])
            logp = torch.log_softmax(logits[:-1], dim=-1)
            nll = -logp.gather(1, target[:, None])[:, 0]
            keep = torch.ones(len(ids) - 1, dtype=torch.bool)
            if masks is not None:
                keep = torch.tensor(masks[b][1:], dtype=torch.bool)
            total = total + nll[keep].sum()
            count += int(keep.sum())
        return total / count


# --------------------------------------------------------------------------
# The vision tower: a CLIP-style encoder (docs/model.md's Encoder) feeding
# the language model, as LLaVA builds it.

E_D, E_H, E_LAYERS, E_HEADS, E_FFN = 12, 32, 2, 4, 64
E_POSITIONS, IMAGE_ID = 9, VOCAB - 1


def gelu_exact(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


def layer_norm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


class VisionTwin:
    """CLIP's vision tower as LLaVA takes it: a patch embedding without
    bias, a class token before the patches, learned position embeddings,
    CLIP's pre-layernorm, pre-norm layers with biases (bidirectional
    attention within the image, QuickGELU as OpenAI's CLIP), the
    penultimate layer's output (output_layer -2), the class token dropped,
    LLaVA's mlp2x_gelu projector (exact GELU). Weights in mimo's layout ([in, out]), named as mimo names
    them (docs/model.md), so that x @ W is the layer.

    With `moe` (mimo's arch.moe keys: num_experts, top_k,
    expert_ffn_hidden_size, shared_expert_ffn_hidden_size, layers,
    router.norm_topk) the listed layers' MLP is docs/model.md's sparse one:
    softmax router scores, each row to its top_k experts (SwiGLU, no
    biases) with their scores as weights (divided by their sum under
    norm_topk), plus a shared expert times sigmoid(x · shared_gate)."""

    def __init__(self, seed, moe=None):
        g = torch.Generator().manual_seed(seed)
        self.moe = moe

        def u(shape, scale, offset=0.0):
            w = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1)
            return (w * scale + offset).float().double()

        p = {"patch.weight": u((E_D, E_H), 1 / math.sqrt(E_D)),
             "class_token": u((E_H,), 1.0),
             "position_embedding": u((E_POSITIONS, E_H), 0.5),
             "pre_norm.weight": u((E_H,), 0.2, 1.0),
             "pre_norm.bias": u((E_H,), 0.2)}
        s = 1 / math.sqrt(E_H)
        for l in range(E_LAYERS - 1):  # output_layer -2: the last is not run
            q = f"layers.{l}."
            p[q + "ln1.weight"], p[q + "ln1.bias"] = u((E_H,), 0.2, 1.0), u((E_H,), 0.2)
            p[q + "ln2.weight"], p[q + "ln2.bias"] = u((E_H,), 0.2, 1.0), u((E_H,), 0.2)
            for w in ("wq", "wk", "wv", "wo"):
                p[q + w] = u((E_H, E_H), 2 * s)
            for b in ("bq", "bk", "bv", "bo"):
                p[q + b] = u((E_H,), 0.5)
            if self.sparse(l):
                e = moe
                fe, fs = e["expert_ffn_hidden_size"], e["shared_expert_ffn_hidden_size"]
                p[q + "router"] = u((E_H, e["num_experts"]), 8 * s)  # sharp
                for j in range(e["num_experts"]):
                    x = q + f"experts.{j}."
                    p[x + "gate"], p[x + "up"] = u((E_H, fe), s), u((E_H, fe), s)
                    p[x + "down"] = u((fe, E_H), 1 / math.sqrt(fe))
                p[q + "shared.gate"], p[q + "shared.up"] = u((E_H, fs), s), u((E_H, fs), s)
                p[q + "shared.down"] = u((fs, E_H), 1 / math.sqrt(fs))
                p[q + "shared_gate"] = u((E_H, 1), 4 * s)
                continue
            p[q + "fc1"], p[q + "fc1_bias"] = u((E_H, E_FFN), s), u((E_FFN,), 0.5)
            p[q + "fc2"] = u((E_FFN, E_H), 1 / math.sqrt(E_FFN))
            p[q + "fc2_bias"] = u((E_H,), 0.5)
        p["projection.fc1.weight"] = u((E_H, HIDDEN), s)
        p["projection.fc1.bias"] = u((HIDDEN,), 0.5)
        p["projection.fc2.weight"] = u((HIDDEN, HIDDEN), 1 / math.sqrt(HIDDEN))
        p["projection.fc2.bias"] = u((HIDDEN,), 0.1)
        self.params = p

    @property
    def tensors(self):  # as HfTower names its weights (tower_checks)
        return self.params

    def sparse(self, l):
        return self.moe is not None and (self.moe["layers"] == "all"
                                         or l in self.moe["layers"])

    def sparse_mlp(self, l, a, stats):
        """Layer l's sparse MLP of rows a; the router logits join stats."""
        p, e = self.params, self.moe
        w = lambda k: p[f"layers.{l}.{k}"]
        logits = a @ w("router")
        stats.append(logits)
        probs = torch.softmax(logits, dim=-1)
        weight, chosen = torch.topk(probs, e["top_k"], dim=-1)
        if e["router"]["norm_topk"]:
            weight = weight / weight.sum(-1, keepdim=True)
        swiglu = lambda x, n: (torch.nn.functional.silu(x @ w(n + "gate"))
                               * (x @ w(n + "up"))) @ w(n + "down")
        out = torch.sigmoid(a @ w("shared_gate")) * swiglu(a, "shared.")
        for j in range(e["num_experts"]):
            rows, slot = torch.nonzero(chosen == j, as_tuple=True)
            out = out.index_add(0, rows, swiglu(a[rows], f"experts.{j}.")
                                * weight[rows, slot][:, None])
        return out

    def forward(self, features, stats=None):
        """One image's feature rows [c, D] -> [c, H of the language];
        a sparse layer's router logits join stats[l]."""
        p = self.params
        d = E_H // E_HEADS
        h = torch.cat([p["class_token"][None], features @ p["patch.weight"]])
        h = h + p["position_embedding"][:h.shape[0]]
        h = layer_norm(h, p["pre_norm.weight"], p["pre_norm.bias"])
        for l in range(E_LAYERS - 1):
            w = lambda k: p[f"layers.{l}.{k}"]
            a = layer_norm(h, w("ln1.weight"), w("ln1.bias"))
            q, k, v = (a @ w("wq") + w("bq"), a @ w("wk") + w("bk"),
                       a @ w("wv") + w("bv"))
            split = lambda t: t.view(-1, E_HEADS, d).transpose(0, 1)
            att = torch.softmax(split(q) @ split(k).transpose(1, 2) /
                                math.sqrt(d), dim=-1) @ split(v)
            h = h + att.transpose(0, 1).reshape(-1, E_H) @ w("wo") + w("bo")
            a = layer_norm(h, w("ln2.weight"), w("ln2.bias"))
            if self.sparse(l):
                h = h + self.sparse_mlp(
                    l, a, [] if stats is None else stats.setdefault(l, []))
                continue
            h = h + quick_gelu(a @ w("fc1") + w("fc1_bias")) @ w("fc2") + w("fc2_bias")
        h = h[1:]  # the class token's row dropped
        y = gelu_exact(h @ p["projection.fc1.weight"] + p["projection.fc1.bias"])
        return y @ p["projection.fc2.weight"] + p["projection.fc2.bias"]


def vlm_loss(lm, vision, batch, stats=None):
    """docs/model.md's Loss for samples with images: the image tokens'
    input rows are the tower's output rows, in order; a position counts
    when s + 1 < length and neither t_s nor t_{s+1} is an image token. A
    sparse tower's router logits join `stats` (VisionTwin.forward)."""
    total, count = 0.0, 0
    p = lm.params
    for ids, feats in batch:
        x = p["embed_tokens"][torch.tensor(ids)].clone()
        rows = [i for i, t in enumerate(ids) if t == IMAGE_ID]
        if rows:
            # Several images: each through the tower alone, rows in order.
            x[rows] = (torch.cat([vision.forward(f, stats) for f in feats])
                       if isinstance(feats, list)
                       else vision.forward(feats, stats))
        logits = lm.forward_embedded(x)
        logp = torch.log_softmax(logits[:-1], dim=-1)
        nll = -logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        keep = torch.tensor([ids[s] != IMAGE_ID and ids[s + 1] != IMAGE_ID
                             for s in range(len(ids) - 1)])
        total = total + nll[keep].sum()
        count += int(keep.sum())
    return total / count


# --------------------------------------------------------------------------
# A Hugging Face vision tower: CLIPVisionModel or SiglipVisionModel as
# transformers' modeling code computes them, on tensors under their Hugging
# Face names ([out, in] linear weights, the patch embedding a convolution),
# with LLaVA's projector (LlavaForConditionalGeneration's image features:
# hidden_states[vision_feature_layer], the class token's row dropped by
# the "default" strategy, linear_1, the activation, linear_2).

E_CHANNELS, E_PATCH, E_IMAGE = 3, 2, 4  # 4x4 images of 2x2 patches: E_D = 12
E_GRID = (E_IMAGE // E_PATCH) ** 2


def patch_rows(image):
    """docs/model.md's feature rows of an image [C, S, S]: each patch
    flattened in (channel, row, col) order, the patches row-major. Written
    apart from the convolution, which checks the order."""
    rows = []
    for i in range(0, image.shape[1], E_PATCH):
        for j in range(0, image.shape[2], E_PATCH):
            rows.append(image[:, i:i + E_PATCH, j:j + E_PATCH].reshape(-1))
    return torch.stack(rows)


class HfTower:
    def __init__(self, family, seed, feature_layer, final_norm=False,
                 dtype="F32", projector_act="gelu"):
        self.family, self.feature_layer = family, feature_layer
        self.final_norm, self.projector_act = final_norm, projector_act
        self.clip = family == "clip"
        self.eps = 1e-5 if self.clip else 1e-6
        g = torch.Generator().manual_seed(seed)

        def u(shape, scale, offset=0.0):
            w = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1)
            w = w * scale + offset
            return (w.to(torch.bfloat16) if dtype == "BF16" else w.float()).double()

        v = "vision_model."
        positions = E_GRID + (1 if self.clip else 0)
        t = {v + "embeddings.patch_embedding.weight":
             u((E_H, E_CHANNELS, E_PATCH, E_PATCH), 1 / math.sqrt(E_D)),
             v + "embeddings.position_embedding.weight": u((positions, E_H), 0.5),
             v + "post_layernorm.weight": u((E_H,), 0.2, 1.0),
             v + "post_layernorm.bias": u((E_H,), 0.2)}
        if self.clip:
            t[v + "embeddings.class_embedding"] = u((E_H,), 1.0)
            t[v + "pre_layrnorm.weight"] = u((E_H,), 0.2, 1.0)
            t[v + "pre_layrnorm.bias"] = u((E_H,), 0.2)
        else:
            t[v + "embeddings.patch_embedding.bias"] = u((E_H,), 0.5)
            # SiglipVisionModel's attention-pooling head (not used here).
            t[v + "head.probe"] = u((1, 1, E_H), 1.0)
            t[v + "head.attention.in_proj_weight"] = u((3 * E_H, E_H), 0.1)
        s = 1 / math.sqrt(E_H)
        for l in range(E_LAYERS):
            q = f"{v}encoder.layers.{l}."
            for n in ("layer_norm1", "layer_norm2"):
                t[q + n + ".weight"], t[q + n + ".bias"] = (
                    u((E_H,), 0.2, 1.0), u((E_H,), 0.2))
            for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
                t[f"{q}self_attn.{n}.weight"] = u((E_H, E_H), 2 * s)
                t[f"{q}self_attn.{n}.bias"] = u((E_H,), 0.5)
            t[q + "mlp.fc1.weight"], t[q + "mlp.fc1.bias"] = (
                u((E_FFN, E_H), s), u((E_FFN,), 0.5))
            t[q + "mlp.fc2.weight"] = u((E_H, E_FFN), 1 / math.sqrt(E_FFN))
            t[q + "mlp.fc2.bias"] = u((E_H,), 0.5)
        m = "multi_modal_projector."
        t[m + "linear_1.weight"] = u((HIDDEN, E_H), s)
        t[m + "linear_1.bias"] = u((HIDDEN,), 0.5)
        t[m + "linear_2.weight"] = u((HIDDEN, HIDDEN), 1 / math.sqrt(HIDDEN))
        t[m + "linear_2.bias"] = u((HIDDEN,), 0.1)
        self.tensors = t

    def act(self, x, name):
        if name == "quick_gelu":
            return x * torch.sigmoid(1.702 * x)
        if name == "gelu":
            return gelu_exact(x)
        assert name == "gelu_pytorch_tanh", name
        return torch.nn.functional.gelu(x, approximate="tanh")

    def forward(self, image, stats=None):  # stats: a dense tower has none
        """One image [C, S, S] -> its rows in the language model [r, HIDDEN]."""
        t, v = self.tensors, "vision_model."
        lin = lambda x, n: x @ t[n + ".weight"].T + t[n + ".bias"]
        x = torch.nn.functional.conv2d(
            image[None], t[v + "embeddings.patch_embedding.weight"],
            t.get(v + "embeddings.patch_embedding.bias"), stride=E_PATCH)
        x = x.flatten(2).transpose(1, 2)[0]  # [grid, H]
        if self.clip:
            x = torch.cat([t[v + "embeddings.class_embedding"][None], x])
        x = x + t[v + "embeddings.position_embedding.weight"][:x.shape[0]]
        norm = lambda x, n: torch.nn.functional.layer_norm(
            x, (E_H,), t[n + ".weight"], t[n + ".bias"], self.eps)
        if self.clip:
            x = norm(x, v + "pre_layrnorm")
        hidden = [x]
        d = E_H // E_HEADS
        for l in range(E_LAYERS):
            q = f"{v}encoder.layers.{l}."
            a = norm(x, q + "layer_norm1")
            split = lambda y: y.view(-1, E_HEADS, d).transpose(0, 1)
            qs, ks, vs = (split(lin(a, f"{q}self_attn.{n}_proj"))
                          for n in ("q", "k", "v"))
            w = torch.softmax(qs @ ks.transpose(1, 2) * d ** -0.5, dim=-1)
            x = x + lin((w @ vs).transpose(0, 1).reshape(-1, E_H),
                        q + "self_attn.out_proj")
            a = norm(x, q + "layer_norm2")
            act = "quick_gelu" if self.clip else "gelu_pytorch_tanh"
            x = x + lin(self.act(lin(a, q + "mlp.fc1"), act), q + "mlp.fc2")
            hidden.append(x)
        h = hidden[self.feature_layer]
        if self.final_norm:  # SiglipVisionModel's last_hidden_state
            h = norm(h, v + "post_layernorm")
        if self.clip:  # LLaVA's "default" strategy: the class token dropped
            h = h[1:]
        m = "multi_modal_projector."
        return lin(self.act(lin(h, m + "linear_1"), self.projector_act),
                   m + "linear_2")
