"""A copy of the method signatures of DeepSpeed's checkpoint engine interface
(deepspeed/runtime/checkpoint_engine/checkpoint_engine.py, DeepSpeed 0.17, Apache-2.0), without
their bodies: DeepSpeed cannot be installed on rt-ft's test machines, so test_deepspeed checks
rtft.deepspeed.RtftCheckpointEngine against this copy."""

from dataclasses import dataclass


@dataclass
class CheckpointCommitInfo(object):
    tag: str
    save_dir: str
    save_latest: bool


class CheckpointEngine:
    def __init__(self, config_params=None): ...

    def create(self, info: CheckpointCommitInfo): ...

    def save(self, state_dict, path: str): ...

    def makedirs(self, path, exist_ok=False): ...

    def load(self, path: str, map_location=None): ...

    def commit(self, info: CheckpointCommitInfo): ...

    def is_data_parallel_writer(self, dp_rank): ...

    def is_decoupled(self): ...

    def set_commit_info(self, info: CheckpointCommitInfo): ...

    def get_commit_info(self): ...

    def cleanup(self): ...

    def preserves_storage_sharing(self): ...


# DataStates-LLM's engine and DeepSpeed before 0.17 also call this one.
class AsyncCheckpointEngine(CheckpointEngine):
    def wait(self): ...


# How DeepSpeed 0.17 itself calls load() (deepspeed/runtime/engine.py: the module's checkpoint,
# the ZeRO shards, the universal checkpoint's optimizer state): its map_location arguments, which
# test_deepspeed passes as they are.
LOADER_MAP_LOCATIONS = [
    lambda storage, loc: storage,  # _load_checkpoint, load_moe_state_dict
    "cpu",  # _get_all_zero_checkpoint_state_dicts
    None,
]
