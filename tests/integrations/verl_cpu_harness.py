"""verl 0.9.1 on the CPU, for tests only: a platform, the FSDP engines, and a transformers rollout.

verl 0.9.1 runs on nvidia, huawei and amd accelerators only. This module lets its own trainer
(``verl.trainer.main_ppo``: the task runner, the v1 trainer, the workers, the FSDP2 engine, TransferQueue, the
reward loop and the checkpoint manager) run unchanged on a CPU-only machine. verl imports it in every process
(driver, task runner, workers, reward workers, rollout server) when launched with::

    PYTHONPATH=tests/integrations VERL_USE_EXTERNAL_MODULES=verl_cpu_harness VERL_PLATFORM=dynashape_cpu \\
        python -m verl.trainer.main_ppo trainer.device=cpu actor_rollout_ref.rollout.name=dynashape_hf \\
        +actor_rollout_ref.model.override_config.attn_implementation=sdpa ...

(:func:`launch_env` builds that environment). Users never need it: they run verl on GPUs.

What it adds, and the verl 0.9.1 internals it relies on:

* ``CPUPlatform``, registered as ``dynashape_cpu`` with ``verl.plugin.platform.PlatformRegistry`` and selected by
  ``VERL_PLATFORM`` (``platform_manager._detect_platform_name``): device ``cpu``, backend ``gloo``, Ray resource
  ``CPU`` (``RayResourcePool.get_placement_groups`` then asks for CPU bundles instead of GPUs). Its
  ``device_module`` answers what verl calls on ``get_torch_device()`` (``torch.cuda`` on GPUs): ``torch.cpu``'s
  functions, ``get_device_name() == "CPU"`` (``utils/flops_counter.get_device_flops``), and 0 for memory
  statistics.
* ``ResourcePoolManager._check_resource_available`` (``verl/single_controller/ray/base.py``) counts only GPUs
  and NPUs in the Ray cluster; it counts CPUs instead.
* ``torch.distributed.init_process_group``: verl builds the backend string ``cpu:gloo,<device>:<backend>``
  (``verl/utils/distributed.py``), which is ``cpu:gloo,cpu:gloo`` here and refused by torch; it is passed as
  ``gloo``.
* The FSDP engines (``FSDPEngineWithLMHead``, ``FSDPEngineWithValueHead`` of
  ``verl/workers/engine/fsdp/transformer_impl.py``) registered for device ``cpu`` with ``EngineRegistry.register``.
* A rollout named ``dynashape_hf``: ``HFReplica`` (a ``RolloutReplica`` in ``RolloutReplicaRegistry``) starts one
  ``HFRolloutServer`` actor per replica that generates with transformers (token in, token out, the
  ``generate(request_id, prompt_ids, sampling_params, ...) -> TokenOutput`` call of ``LLMServerClient``);
  ``HFRolloutAdapter`` (a ``BaseRollout`` in ``verl.workers.rollout.base._ROLLOUT_REGISTRY``) lives in each
  actor worker and forwards the weights verl pushes after every update (``update_weights`` of the naive
  checkpoint engine) to its replica's server. Sleep, wake-up and KV-cache calls are no-ops.
  Sampling is seeded by the pushed weights and the prompt, so two runs that reach the same weights generate the
  same responses for each prompt, in whatever order the requests arrive.

With ``DYNASHAPE_VERL_E2E_RECORD=DIR`` the rollout server also saves the weights of every push
(``DIR/weights_after_step_<N>.pt``) and :mod:`verl_e2e_recorder` saves what each step's advantages were computed
from, for the end-to-end test.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch

VERL_VERSION = "0.9.1"
PLATFORM = "dynashape_cpu"
ROLLOUT = "dynashape_hf"
SERVER_NAME = "dynashape_hf_server_{}"
HERE = Path(__file__).resolve().parent


def launch_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment under which verl's processes load this harness (see the module docstring)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    env["VERL_USE_EXTERNAL_MODULES"] = __name__.rsplit(".", 1)[-1]
    env["VERL_PLATFORM"] = PLATFORM
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


# ---------------------------------------------------------------------------------------------------------
# Platform: device cpu, backend gloo
# ---------------------------------------------------------------------------------------------------------


#: Memory statistics and cache calls verl makes on ``get_torch_device()``, which a CPU has nothing to say to.
_NOTHING_TO_REPORT: frozenset[str] = frozenset(
    {
        "empty_cache",
        "ipc_collect",
        "max_memory_allocated",
        "max_memory_reserved",
        "memory_allocated",
        "memory_reserved",
        "reset_peak_memory_stats",
        "set_per_process_memory_fraction",
    }
)


class _CPUDevice:
    """What verl calls on ``get_torch_device()`` (``torch.cuda`` on GPUs), answered for the CPU."""

    def __getattr__(self, name: str) -> Any:
        if name in _NOTHING_TO_REPORT:
            return lambda *args, **kwargs: 0
        if not name.startswith("__") and hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        # anything else verl asks of the device is a call this stand-in does not know: fail, never answer 0
        raise AttributeError(f"the CPU stand-in for verl's torch device has no {name!r}")

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def get_device_name(*args: Any) -> str:
        return "CPU"

    @staticmethod
    def mem_get_info(*args: Any) -> tuple[int, int]:
        return (16 << 30, 16 << 30)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(*args: Any) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, *args: Any) -> None:
        torch.set_rng_state(state)


def _register_platform() -> None:
    from verl.plugin.platform import PlatformBase, PlatformRegistry

    if PlatformRegistry.get(PLATFORM) is not None:
        return

    @PlatformRegistry.register(platform=PLATFORM)
    class CPUPlatform(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = _CPUDevice()

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return False  # never auto-detected: only VERL_PLATFORM selects it

        def current_device(self) -> str:
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: Any) -> None:
            pass

        def synchronize(self, device_index: Any = None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "DYNASHAPE_CPU_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_cpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> None:
            return None


def _patch_process_group() -> None:
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "_dynashape_cpu", False):
        return

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend")
        if isinstance(backend, str) and "gloo" in backend and "nccl" not in backend:
            kwargs["backend"] = "gloo"  # verl's "cpu:gloo,cpu:gloo" names the CPU twice, which torch refuses
        return original(*args, **kwargs)

    init_process_group._dynashape_cpu = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group


# ---------------------------------------------------------------------------------------------------------
# FSDP engines for device cpu
# ---------------------------------------------------------------------------------------------------------


def _patch_resource_check(module: Any) -> None:
    # ResourcePoolManager._check_resource_available counts only "GPU" and "NPU" in Ray's available resources.
    cls = module.ResourcePoolManager

    def _check_resource_available(self: Any) -> None:
        import ray

        available = sum(node.get("CPU", 0) for node in ray._private.state.available_resources_per_node().values())
        if available < self.get_n_gpus():
            raise ValueError(
                f"Total available CPUs {available} is less than total desired processes {self.get_n_gpus()}"
            )

    cls._check_resource_available = _check_resource_available


def _register_engines(module: Any) -> None:
    from verl.workers.engine.base import EngineRegistry

    for model_type, cls in (
        ("language_model", module.FSDPEngineWithLMHead),
        ("value_model", module.FSDPEngineWithValueHead),
    ):
        for backend in ("fsdp", "fsdp2"):
            if "cpu" not in EngineRegistry._engines.get(model_type, {}).get(backend, {}):
                EngineRegistry.register(model_type=model_type, backend=backend, device="cpu")(cls)


# ---------------------------------------------------------------------------------------------------------
# Rollout: a transformers server per replica, fed by the weights verl pushes
# ---------------------------------------------------------------------------------------------------------


class HFRolloutServer:
    """A token-in token-out generation server on a transformers model (one Ray actor per replica)."""

    def __init__(self, model_path: str, dtype: str = "float32") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=getattr(torch, dtype), attn_implementation="sdpa"
        ).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
        self.eos.discard(None)
        self.global_steps: int | None = None
        self._version = self._digest()
        self._seen: Counter = Counter()

    def _digest(self) -> str:
        h = hashlib.sha1()
        for name, tensor in sorted(self.model.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().float().contiguous().numpy().tobytes())
        return h.hexdigest()

    def update_weights(self, weights: dict[str, torch.Tensor]) -> None:
        state = self.model.state_dict()
        # A name mismatch (a prefix verl adds, a renamed layer) would leave the rollout on stale weights while
        # the actor trains: refuse it rather than skip.
        unknown = sorted(set(weights) - set(state))
        if unknown:
            raise KeyError(f"weight push: {len(unknown)} names the rollout model lacks, first {unknown[0]!r}")
        missing = sorted({name for name, _ in self.model.named_parameters()} - set(weights))
        if missing:
            raise KeyError(f"weight push: {len(missing)} parameters not pushed, first {missing[0]!r}")
        for name, tensor in weights.items():
            state[name].copy_(tensor.to(state[name].dtype))
        self._version = self._digest()
        self._seen.clear()

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps
        record = os.environ.get("DYNASHAPE_VERL_E2E_RECORD")
        if record:  # the end-to-end test reads the weights each step generated (and verl's forward ran) with
            os.makedirs(record, exist_ok=True)
            torch.save(self.model.state_dict(), os.path.join(record, f"weights_after_step_{global_steps}.pt"))

    def weights_version(self) -> str:
        return self._version

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        key = (self._version, tuple(prompt_ids))
        self._seen[key] += 1
        seed = int.from_bytes(hashlib.sha1(repr((key, self._seen[key])).encode()).digest()[:8], "little")
        gen = torch.Generator().manual_seed(seed)
        max_tokens = int(sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens") or 16)
        temperature = float(sampling_params.get("temperature", 1.0))
        top_p = float(sampling_params.get("top_p", 1.0))
        top_k = int(sampling_params.get("top_k", -1))
        tokens: list[int] = []
        log_probs: list[float] = []
        ids = torch.tensor([prompt_ids], dtype=torch.long)
        past = None
        with torch.no_grad():
            for _ in range(max_tokens):
                out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                if temperature <= 0:
                    token = int(logits.argmax())
                    logp = torch.log_softmax(logits, -1)
                else:
                    logp = torch.log_softmax(logits / temperature, -1)
                    probs = logp.exp()
                    if top_k > 0:
                        kth = torch.topk(probs, top_k).values[-1]
                        probs = torch.where(probs >= kth, probs, 0.0)
                    if top_p < 1.0:
                        sorted_p, order = probs.sort(descending=True)
                        drop = sorted_p.cumsum(0) - sorted_p > top_p
                        probs[order[drop]] = 0.0
                    token = int(torch.multinomial(probs / probs.sum(), 1, generator=gen))
                tokens.append(token)
                log_probs.append(float(logp[token]))
                if token in self.eos:
                    break
                ids = torch.tensor([[token]], dtype=torch.long)
        await asyncio.sleep(0)
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    # What verl's replicas and checkpoint manager call around generation; nothing to free on the CPU.
    def sleep(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wake_up(self, *args: Any, **kwargs: Any) -> None:
        pass

    def clear_kv_cache(self) -> None:
        pass

    def release_kv_cache(self) -> None:
        pass

    def resume_kv_cache(self) -> None:
        pass

    def abort_all_requests(self, *args: Any, **kwargs: Any) -> dict:
        return {}

    def resume_generation(self) -> None:
        pass

    def wait_for_requests_to_drain(self) -> None:
        pass

    def start_profile(self, **kwargs: Any) -> None:
        pass

    def stop_profile(self) -> None:
        pass


def _rollout_world_size(config: Any) -> int:
    return config.tensor_model_parallel_size * config.data_parallel_size * config.pipeline_model_parallel_size


def _model_path(model_config: Any) -> str:
    return os.path.expanduser(str(model_config.path))


def _replica_class() -> type:
    import ray
    from verl.workers.rollout.replica import RolloutReplica

    class HFReplica(RolloutReplica):
        """One transformers server per replica; the replica's actor workers push weights to it."""

        async def launch_servers(self) -> None:
            server = (
                ray.remote(HFRolloutServer)
                .options(name=SERVER_NAME.format(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency)
                .remote(_model_path(self.model_config), "float32")
            )
            await server.weights_version.remote()  # loaded and ready
            self.servers = [server]
            self._server_handle = server
            self._server_address = f"{ROLLOUT}-{self.replica_rank}"

        async def sleep(self) -> None:
            pass

        async def wake_up(self) -> None:
            pass

    return HFReplica


def _adapter_class() -> type:
    import ray
    from verl.workers.rollout.base import BaseRollout

    class HFRolloutAdapter(BaseRollout):
        """The worker side of the rollout: forwards verl's weight pushes to this replica's server."""

        def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, model_config, device_mesh)
            world = _rollout_world_size(self.config)
            rank = int(os.environ["RANK"])
            self.replica_rank = rank // world
            self.is_leader = rank % world == 0
            self._server = None

        def _server_handle(self) -> Any:
            if self._server is None:
                self._server = ray.get_actor(SERVER_NAME.format(self.replica_rank))
            return self._server

        async def resume(self, tags: list[str]) -> None:
            pass

        async def release(self) -> None:
            pass

        async def update_weights(self, weights: Any, wire_format: str = "named_tensors", **kwargs: Any) -> None:
            # Every rank walks the generator: with FSDP each tensor is all-gathered across ranks.
            full = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
            if self.is_leader:
                server = self._server_handle()
                await server.update_weights.remote(full)
                if kwargs.get("global_steps") is not None:
                    await server.set_global_steps.remote(kwargs["global_steps"])

    return HFRolloutAdapter


_ADAPTER: type | None = None


def __getattr__(name: str) -> Any:
    # verl resolves rollout classes by dotted path (``_ROLLOUT_REGISTRY``); build the class on first use.
    global _ADAPTER
    if name == "HFRolloutAdapter":
        if _ADAPTER is None:
            _ADAPTER = _adapter_class()
        return _ADAPTER
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register_rollout_replica(module: Any) -> None:
    module.RolloutReplicaRegistry.register(ROLLOUT, _replica_class)


def _register_rollout_adapter(module: Any) -> None:
    module._ROLLOUT_REGISTRY[(ROLLOUT, "async")] = f"{__name__}.HFRolloutAdapter"


# ---------------------------------------------------------------------------------------------------------
# Installed on import (every verl process imports this module through VERL_USE_EXTERNAL_MODULES)
# ---------------------------------------------------------------------------------------------------------


def install() -> None:
    import verl

    from dynashape.integrations._post_import import when_imported

    if verl.__version__ != VERL_VERSION:  # the internals above are 0.9.1's; another version needs a new look
        raise RuntimeError(f"{__name__} is written for verl {VERL_VERSION}, found verl {verl.__version__}")
    _register_platform()
    _patch_process_group()
    when_imported("verl.single_controller.ray.base", _patch_resource_check)
    when_imported("verl.workers.engine.fsdp.transformer_impl", _register_engines)
    when_imported("verl.workers.rollout.replica", _register_rollout_replica)
    when_imported("verl.workers.rollout.base", _register_rollout_adapter)
    recorder = os.environ.get("DYNASHAPE_VERL_E2E_RECORD")
    if recorder:
        from verl_e2e_recorder import install as install_recorder

        install_recorder(recorder)


if "verl" in sys.modules:
    install()

__all__ = ["HERE", "PLATFORM", "ROLLOUT", "HFRolloutServer", "install", "launch_env"]
