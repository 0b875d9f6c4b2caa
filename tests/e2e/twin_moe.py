"""The MoE cases of tests/e2e/twin.py: Mixtral, Qwen2-MoE and Qwen3-MoE as
transformers computes them, by hand, float64.

Each family's twin is written as a Hugging Face folder (its config.json keys
and tensor names: Mixtral's block_sparse_moe.gate and experts.J.w1/w3/w2;
Qwen's mlp.gate, mlp.experts.J.{gate,up,down}_proj, Qwen2-MoE's
mlp.shared_expert and mlp.shared_expert_gate, mlp_only_layers' dense MLPs;
Qwen3's self_attn.q_norm/k_norm) and mimo trains from it (`init` format
hf) in several layouts, and once from the same weights stacked as
transformers 5 holds them (mlp.gate, mlp.experts.gate_up_proj and
down_proj) under tp 2. The twin's sparse MLP follows the modeling code:
router logits = gate(x), routing weights = softmax(logits) in float, the
top-k, divided by their sum for Mixtral and when norm_topk_prob, the
experts' outputs w2(silu(w1 x) * w3 x) summed with those weights, plus the
shared expert times sigmoid(shared_expert_gate(x)); Qwen3's q and k are
RMSNorm'ed per head before RoPE. The aux loss is mimo's definition
(docs/model.md "Mixture of experts": per sparse layer and global
microbatch experts · Σ_e f_e · P_e, f_e the share of routed slots that chose
e and P_e the mean router probability, over the microbatch's tokens, summed
over layers, the mean over microbatches, times aux_loss_coef; the z loss
the same way). transformers' load_balancing_loss_func differs: it pools
every layer's tokens into one f and P and counts the top-k slots as k
rows, so for one sparse layer and one batch it is top_k times mimo's; the
twin checks that relation too.

mimo's step-1 loss and aux_loss must match the twin's within 1e-5 in every
layout; --export-hf of its step-1 checkpoint must hold the family's names
and config keys, and the twin on the export must give mimo's step-2 loss.
"""
import json
import math
import os
import subprocess

import torch

from twin_files import SEQ, read_safetensors, write_folder
from twin_models import HEADS, HIDDEN, LAYERS, VOCAB, inv_freq, rms_norm, rotate_half
from twin_run import GLOBAL_BATCH, MICRO, MICROBATCHES, TOL, RunError, compare, run_mimo

FFN, EXPERT_FFN, SHARED_FFN = 96, 32, 64
AUX, ZLOSS = 0.02, 0.001
LAYOUTS = [("1", {}), ("tp2", {"tp": 2}), ("pp2", {"pp": 2}),
           ("dp2", {"dp": 2}), ("cp2", {"cp": 2}),
           ("tp2pp2", {"tp": 2, "pp": 2, "sequence_parallel": True})]

# The families: transformers' config and mimo's arch keys.
FAMILIES = {
    "mixtral": dict(model_type="mixtral", arch="MixtralForCausalLM",
                    experts=4, top_k=2, expert_ffn=FFN, norm=True,
                    dense=[], shared=0, qkv_bias=False, qk_norm=False,
                    head_dim=HIDDEN // HEADS),
    "qwen2_moe": dict(model_type="qwen2_moe", arch="Qwen2MoeForCausalLM",
                      experts=4, top_k=2, expert_ffn=EXPERT_FFN, norm=False,
                      dense=[0], shared=SHARED_FFN, qkv_bias=True,
                      qk_norm=False, head_dim=HIDDEN // HEADS),
    # Heads twice hidden_size / num_heads wide, as Qwen3-30B-A3B's (head_dim
    # 128 at hidden 2048 and 32 heads): arch.head_dim.
    "qwen3_moe": dict(model_type="qwen3_moe", arch="Qwen3MoeForCausalLM",
                      experts=8, top_k=2, expert_ffn=EXPERT_FFN, norm=True,
                      dense=[], shared=0, qkv_bias=False, qk_norm=True,
                      head_dim=2 * HIDDEN // HEADS),
}
GROUPS, EPS, THETA = 2, 1e-6, 1000000.0


class MoeTwin:
    """A MoE causal language model, weights [out, in] under their Hugging
    Face names."""

    def __init__(self, family, seed):
        self.f = f = FAMILIES[family]
        self.family = family
        g = torch.Generator().manual_seed(seed)
        d = f["head_dim"]
        A = HEADS * d  # q's and o's width

        def u(shape, scale, offset=0.0):
            w = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
            return (w * scale + offset).float().double()

        s = 1 / math.sqrt(HIDDEN)
        p = {"model.embed_tokens.weight": u((VOCAB, HIDDEN), 0.02),
             "model.norm.weight": u((HIDDEN,), 0.2, 1.0),
             "lm_head.weight": u((VOCAB, HIDDEN), 2 * s)}
        block = "block_sparse_moe." if family == "mixtral" else "mlp."
        for l in range(LAYERS):
            a = f"model.layers.{l}."
            p[a + "input_layernorm.weight"] = u((HIDDEN,), 0.2, 1.0)
            p[a + "post_attention_layernorm.weight"] = u((HIDDEN,), 0.2, 1.0)
            p[a + "self_attn.q_proj.weight"] = u((A, HIDDEN), 4 * s)
            p[a + "self_attn.k_proj.weight"] = u((GROUPS * d, HIDDEN), 4 * s)
            p[a + "self_attn.v_proj.weight"] = u((GROUPS * d, HIDDEN), s)
            p[a + "self_attn.o_proj.weight"] = u((HIDDEN, A), s)
            if f["qkv_bias"]:
                for x, n in (("q", A), ("k", GROUPS * d), ("v", GROUPS * d)):
                    p[a + f"self_attn.{x}_proj.bias"] = u((n,), 1.0)
            if f["qk_norm"]:
                p[a + "self_attn.q_norm.weight"] = u((d,), 0.3, 1.0)
                p[a + "self_attn.k_norm.weight"] = u((d,), 0.3, 1.0)
            if l in f["dense"]:
                p[a + "mlp.gate_proj.weight"] = u((FFN, HIDDEN), s)
                p[a + "mlp.up_proj.weight"] = u((FFN, HIDDEN), s)
                p[a + "mlp.down_proj.weight"] = u((HIDDEN, FFN), 1 / math.sqrt(FFN))
                continue
            # A sharp router: routes that differ by token.
            p[a + block + "gate.weight"] = u((f["experts"], HIDDEN), 8 * s)
            F = f["expert_ffn"]
            for j in range(f["experts"]):
                e = a + block + f"experts.{j}."
                names = (("w1", "w3", "w2") if family == "mixtral"
                         else ("gate_proj", "up_proj", "down_proj"))
                p[e + names[0] + ".weight"] = u((F, HIDDEN), s)
                p[e + names[1] + ".weight"] = u((F, HIDDEN), s)
                p[e + names[2] + ".weight"] = u((HIDDEN, F), 1 / math.sqrt(F))
            if f["shared"]:
                e = a + "mlp.shared_expert."
                p[e + "gate_proj.weight"] = u((f["shared"], HIDDEN), s)
                p[e + "up_proj.weight"] = u((f["shared"], HIDDEN), s)
                p[e + "down_proj.weight"] = u((HIDDEN, f["shared"]),
                                              1 / math.sqrt(f["shared"]))
                p[a + "mlp.shared_expert_gate.weight"] = u((1, HIDDEN), 4 * s)
        self.params = p
        self.block = block

    def config(self):
        f = self.f
        c = {"architectures": [f["arch"]], "model_type": f["model_type"],
             "hidden_act": "silu", "hidden_size": HIDDEN,
             "intermediate_size": FFN, "num_hidden_layers": LAYERS,
             "num_attention_heads": HEADS, "num_key_value_heads": GROUPS,
             "head_dim": f["head_dim"], "vocab_size": VOCAB,
             "rms_norm_eps": EPS, "rope_theta": THETA,
             "tie_word_embeddings": False, "max_position_embeddings": 4 * SEQ,
             "num_experts_per_tok": f["top_k"],
             "router_aux_loss_coef": AUX, "output_router_logits": False,
             "torch_dtype": "float32"}
        if self.family == "mixtral":
            c["num_local_experts"] = f["experts"]
        else:
            c.update(num_experts=f["experts"],
                     moe_intermediate_size=f["expert_ffn"],
                     norm_topk_prob=f["norm"], decoder_sparse_step=1,
                     mlp_only_layers=f["dense"])
        if f["shared"]:
            c["shared_expert_intermediate_size"] = f["shared"]
        return c

    def arch(self):
        """mimo's arch keys for the same model."""
        f = self.f
        moe = {"num_experts": f["experts"], "top_k": f["top_k"],
               "expert_ffn_hidden_size": f["expert_ffn"],
               "layers": [l for l in range(LAYERS) if l not in f["dense"]],
               "router": {"norm_topk": f["norm"], "aux_loss_coef": AUX,
                          "z_loss_coef": ZLOSS}}
        if f["shared"]:
            moe["shared_expert_ffn_hidden_size"] = f["shared"]
        arch = {"family": self.family, "vocab_size": VOCAB,
                "hidden_size": HIDDEN, "num_layers": LAYERS,
                "num_heads": HEADS, "ffn_hidden_size": FFN,
                "num_query_groups": GROUPS, "rope_theta": THETA,
                "norm_eps": EPS, "moe": moe}
        if f["head_dim"] != HIDDEN // HEADS:
            arch["head_dim"] = f["head_dim"]
        return arch

    def sparse_mlp(self, x, a, stats):
        """transformers' sparse MoE block over rows x [T, H]; appends the
        layer's router logits to `stats`."""
        f, p, b = self.f, self.params, a + self.block
        logits = x @ p[b + "gate.weight"].t()
        stats.append(logits)
        probs = torch.softmax(logits, dim=-1)
        w, chosen = torch.topk(probs, f["top_k"], dim=-1)
        if f["norm"]:
            w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        names = (("w1", "w3", "w2") if self.family == "mixtral"
                 else ("gate_proj", "up_proj", "down_proj"))
        for j in range(f["experts"]):
            rows, slot = torch.nonzero(chosen == j, as_tuple=True)
            if len(rows) == 0:
                continue
            e = b + f"experts.{j}."
            h = x[rows]
            y = (torch.nn.functional.silu(h @ p[e + names[0] + ".weight"].t())
                 * (h @ p[e + names[1] + ".weight"].t())) @ p[e + names[2] + ".weight"].t()
            out.index_add_(0, rows, y * w[rows, slot][:, None])
        if f["shared"]:
            e = a + "mlp.shared_expert."
            y = (torch.nn.functional.silu(x @ p[e + "gate_proj.weight"].t())
                 * (x @ p[e + "up_proj.weight"].t())) @ p[e + "down_proj.weight"].t()
            gate = torch.sigmoid(x @ p[a + "mlp.shared_expert_gate.weight"].t())
            out = out + gate * y
        return out

    def forward(self, ids, stats):
        f, p = self.f, self.params
        n, G, d = HEADS, GROUPS, f["head_dim"]
        x = p["model.embed_tokens.weight"][torch.tensor(ids)]
        ell = x.shape[0]
        pos = torch.arange(ell, dtype=torch.float64)
        freqs = torch.outer(pos, inv_freq(d, THETA, None))
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        causal = torch.ones(ell, ell, dtype=torch.bool).tril()
        kv_map = [i // (n // G) for i in range(n)]
        for l in range(LAYERS):
            a = f"model.layers.{l}."
            w = lambda k: p[a + k]
            h = rms_norm(x, w("input_layernorm.weight"), EPS)
            q = h @ w("self_attn.q_proj.weight").t()
            k = h @ w("self_attn.k_proj.weight").t()
            v = h @ w("self_attn.v_proj.weight").t()
            if f["qkv_bias"]:
                q = q + w("self_attn.q_proj.bias")
                k = k + w("self_attn.k_proj.bias")
                v = v + w("self_attn.v_proj.bias")
            q = q.view(ell, n, d)
            k = k.view(ell, G, d)
            if f["qk_norm"]:  # Qwen3: per head, before RoPE
                q = rms_norm(q, w("self_attn.q_norm.weight"), EPS)
                k = rms_norm(k, w("self_attn.k_norm.weight"), EPS)
            q, k = q.transpose(0, 1), k.transpose(0, 1)
            v = v.view(ell, G, d).transpose(0, 1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k, v = k[kv_map], v[kv_map]
            scores = (q @ k.transpose(1, 2) / math.sqrt(d)).masked_fill(
                ~causal, float("-inf"))
            o = torch.softmax(scores, dim=-1) @ v
            x = x + o.transpose(0, 1).reshape(ell, n * d) @ w("self_attn.o_proj.weight").t()
            h = rms_norm(x, w("post_attention_layernorm.weight"), EPS)
            if l in f["dense"]:
                y = (torch.nn.functional.silu(h @ w("mlp.gate_proj.weight").t())
                     * (h @ w("mlp.up_proj.weight").t())) @ w("mlp.down_proj.weight").t()
            else:
                y = self.sparse_mlp(h, a, stats[l])
            x = x + y
        return rms_norm(x, p["model.norm.weight"], EPS) @ p["lm_head.weight"].t()

    def losses(self, batch):
        """(loss, aux_loss, transformers' load-balancing loss of the whole
        batch for the first sparse layer alone, mimo's aux of that layer
        over the whole batch)."""
        f = self.f
        E, K = f["experts"], f["top_k"]
        total, count = 0.0, 0
        per_mb = []
        for m in range(MICROBATCHES):
            stats = {l: [] for l in range(LAYERS)}
            for ids in batch[m * MICRO:(m + 1) * MICRO]:
                logits = self.forward(ids, stats)
                logp = torch.log_softmax(logits[:-1], dim=-1)
                total = total + (-logp.gather(1, torch.tensor(ids[1:])[:, None])).sum()
                count += len(ids) - 1
            per_mb.append(stats)
        aux = 0.0
        for stats in per_mb:
            for l in range(LAYERS):
                if not stats[l]:
                    continue
                z = torch.cat(stats[l])
                probs = torch.softmax(z, dim=-1)
                chosen = torch.topk(probs, K, dim=-1).indices
                frac = torch.nn.functional.one_hot(chosen, E).sum(1).double().mean(0) / K
                aux = aux + AUX * E * (frac * probs.mean(0)).sum()
                aux = aux + ZLOSS * (torch.logsumexp(z, dim=-1) ** 2).mean()
        aux = aux / MICROBATCHES
        # transformers' load_balancing_loss_func for one layer and the
        # whole batch, against mimo's per-layer term over the same tokens.
        first = next(l for l in range(LAYERS) if l not in f["dense"])
        z = torch.cat([t for stats in per_mb for t in stats[first]])
        probs = torch.softmax(z, dim=-1)
        chosen = torch.topk(probs, K, dim=-1).indices
        mask = torch.nn.functional.one_hot(chosen, E).double()
        hf = (mask.mean(0) * probs.mean(0)[None]).sum() * E
        mine = E * ((mask.sum(1).mean(0) / K) * probs.mean(0)).sum()
        return total / count, float(aux), float(hf), float(mine)


def fused_experts(params, family):
    """The same weights as transformers 5 holds a sparse MLP: mlp.gate (also
    Mixtral's router), mlp.experts.gate_up_proj [E, 2F, H] (each expert's
    gate rows, then its up rows) and mlp.experts.down_proj [E, H, F]."""
    block = "block_sparse_moe." if family == "mixtral" else "mlp."
    names = (("w1", "w3", "w2") if family == "mixtral"
             else ("gate_proj", "up_proj", "down_proj"))
    out, experts = {}, {}
    for name, t in params.items():
        at = name.find("." + block + "experts.")
        if at < 0:
            out[name.replace("." + block + "gate.", ".mlp.gate.")] = t
            continue
        layer = name[:at + 1]
        j, linear = name[at + len(block) + 9:].split(".")[:2]
        experts.setdefault(layer, {})[(int(j), names.index(linear))] = t
    for layer, ts in experts.items():
        count = 1 + max(j for j, _ in ts)
        out[layer + "mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([ts[(j, 0)], ts[(j, 1)]], 0) for j in range(count)])
        out[layer + "mlp.experts.down_proj"] = torch.stack(
            [ts[(j, 2)] for j in range(count)])
    return out


def hf_twin(family, folder, seed):
    """A twin whose weights are an exported folder's (one fp32 file)."""
    twin = MoeTwin(family, seed)
    tensors = read_safetensors(os.path.join(folder, "model.safetensors"))
    if set(tensors) != set(twin.params):
        raise RunError(f"{folder}: tensors differ from the twin's: "
                       f"{sorted(set(tensors) ^ set(twin.params))[:6]}")
    import numpy as np
    for name, (shape, raw) in tensors.items():
        if tuple(twin.params[name].shape) != shape:
            raise RunError(f"{folder}: {name} has shape {shape}")
        twin.params[name] = torch.from_numpy(
            np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float64))
    return twin


def run_moe(bin_dir, work, samples, data_path, model_json):
    failures = []
    for family in FAMILIES:
        seed = 500 + len(family)
        twin = MoeTwin(family, seed)
        init = os.path.join(work, f"init-{family}")
        write_folder(init, twin.config(),
                     [(n, t.numpy().astype("<f4")) for n, t in twin.params.items()],
                     "F32", 1)
        # transformers 5's stacked experts, in two shards: read alike.
        fused = os.path.join(work, f"init-{family}-fused")
        write_folder(fused, twin.config(),
                     [(n, t.numpy().astype("<f4"))
                      for n, t in fused_experts(twin.params, family).items()],
                     "F32", 2)
        with torch.no_grad():
            loss, aux, hf, mine = twin.losses(samples[:GLOBAL_BATCH])
            second, _, _, _ = twin.losses(samples[GLOBAL_BATCH:2 * GLOBAL_BATCH])
        k = twin.f["top_k"]
        r = abs(hf - k * mine) / abs(hf)
        print(f"{'ok  ' if r < 1e-12 else 'FAIL'} {family}/hf-aux: transformers' "
              f"load-balancing loss {hf:.8f} = top_k x mimo's {mine:.8f} "
              f"(rel {r:.1e})")
        if r >= 1e-12:
            failures.append(f"{family}: transformers' aux relation")
        for layout, parallel in LAYOUTS + [("fused-tp2", {"tp": 2})]:
            tag = f"{family}-{layout}"
            model = os.path.join(work, tag + ".json")
            model_json(model, "twin", {}, parallel,
                       fused if layout.startswith("fused") else init,
                       data_path, init_format="hf")
            spec = json.load(open(model))
            spec["modules"][0]["arch"] = twin.arch()
            json.dump(spec, open(model, "w"), indent=1)
            try:
                export = os.path.join(work, tag + "-hf") if layout == "tp2pp2" else None
                lines = run_mimo(bin_dir, work, tag, model, 2 if export else 1,
                                 save=os.path.join(work, tag + "-save") if export else None,
                                 export=export)
            except (RunError, subprocess.TimeoutExpired, OSError, ValueError) as e:
                print(f"FAIL {family}/{layout}: mimo failed:\n{e}")
                failures.append(f"{family}/{layout}: run failed")
                continue
            compare(f"{family}/{layout}", loss, lines[0]["loss"], failures)
            compare(f"{family}/{layout}/aux_loss", aux,
                    lines[0].get("aux_loss", float("nan")), failures)
            if not export:
                continue
            try:
                config = json.load(open(os.path.join(export, "config.json")))
                want = twin.config()
                wrong = {key: (config.get(key), want[key]) for key in want
                         if key not in ("torch_dtype", "max_position_embeddings",
                                        "output_router_logits")
                         and config.get(key) != want[key]}
                if wrong:
                    raise RunError(f"config.json (found, expected): {wrong}")
                exported = hf_twin(family, export, seed)
                with torch.no_grad():
                    got, _, _, _ = exported.losses(samples[GLOBAL_BATCH:2 * GLOBAL_BATCH])
                compare(f"{family}/export", got, lines[1]["loss"], failures)
                if abs(got - second) < 100 * TOL * abs(second):
                    print(f"FAIL {family}/export: step 1 barely moved the weights")
                    failures.append(f"{family}/export: untrained")
            except (RunError, OSError, ValueError, KeyError) as e:
                print(f"FAIL {family}/export: {e}")
                failures.append(f"{family}/export")
    return failures
