"""The Hugging Face parameter names and logical shapes of inputs/tiny-{gpt2,llama}.ini,
spelled out here from the Hugging Face model definitions (not taken from meshtrain), for
the h5py checks of checkpoints (check_h5.py, check_known_state.py)."""

# inputs/tiny-{gpt2,llama}.ini
V, C, L, H, P = 264, 64, 2, 4, 64


def hf_shapes(family):
    s = {}
    if family == "gpt2":
        F = 4 * C
        s.update({"transformer.wte.weight": (V, C), "transformer.wpe.weight": (P, C),
                  "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)})
        for i in range(L):
            p = f"transformer.h.{i}."
            s.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                      p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                      p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                      p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                      p + "mlp.c_fc.weight": (C, F), p + "mlp.c_fc.bias": (F,),
                      p + "mlp.c_proj.weight": (F, C), p + "mlp.c_proj.bias": (C,)})
    else:
        KV, F, hd = 2, 128, C // H
        s.update({"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)})
        for i in range(L):
            p = f"model.layers.{i}."
            s.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                      p + "self_attn.q_proj.weight": (H * hd, C), p + "self_attn.k_proj.weight": (KV * hd, C),
                      p + "self_attn.v_proj.weight": (KV * hd, C), p + "self_attn.o_proj.weight": (C, H * hd),
                      p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                      p + "mlp.down_proj.weight": (C, F)})
    return s
