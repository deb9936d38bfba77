"""The automatic CPU KV-cache size of the vllm engine (plain arithmetic: runs without vLLM installed)."""

from types import SimpleNamespace

from userrl.engines.vllm import cpu_kv_cache_bytes

# SmolLM2-135M: 30 layers, 9 query heads of 64 over a width of 576, 3 KV heads.
SMOLLM2 = SimpleNamespace(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, num_hidden_layers=30)


def test_room_for_every_sequence_at_full_length():
    # K and V x 30 layers x 3 heads x 64 dims x 2 bytes = 23,040 bytes per bf16 token.
    assert cpu_kv_cache_bytes(SMOLLM2, "bfloat16", 32, 640) == 32 * 640 * 23_040  # the quickstart: 450 MiB
    # Lengths round up to whole blocks; float32 doubles the bytes.
    assert cpu_kv_cache_bytes(SMOLLM2, "float32", 4, 1000) == 4 * 1024 * 46_080


def test_capped_at_two_gib_but_never_below_one_sequence():
    assert cpu_kv_cache_bytes(SMOLLM2, "float32", 64, 2048) == 2 * 2**30  # 6 GB asked for
    huge = SimpleNamespace(hidden_size=8192, num_attention_heads=64, num_key_value_heads=64, num_hidden_layers=80)
    one = 2 * 80 * 64 * 128 * 2 * 4096  # one 4096-token sequence: 10 GiB
    assert cpu_kv_cache_bytes(huge, "bfloat16", 8, 4096) == one
