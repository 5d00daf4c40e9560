"""Vetting a checkpoint folder before anything in it loads, and loading its components strictly.

A Cosmos 3 checkpoint in diffusers' layout is data that picks code: a config's ``_class_name``
chooses whose loader runs, a ``.bin`` weight file is a pickle, a tokenizer may ask for custom
code. Only allow-listed classes, safetensors weights and built-in tokenizers get through, and
weights that do not fit their config are refused instead of half-loaded.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

COMPONENTS = {
    "transformer": "transformer/config.json and its *.safetensors weights",
    "vae": "vae/config.json and its *.safetensors weights",
    "text_tokenizer": "text_tokenizer/ (tokenizer files)",
    "scheduler": "scheduler/scheduler_config.json",
    "sound_tokenizer": "sound_tokenizer/config.json and its *.safetensors weights (optional: sound generation)",
}
CONFIG_FILES = {"transformer": "config.json", "vae": "config.json", "scheduler": "scheduler_config.json",
                "sound_tokenizer": "config.json"}
# The classes a checkpoint may name. A config is data, but its ``_class_name`` picks whose loader runs:
# resolving it by name would let a checkpoint point a model loader at a folder holding a pickle.
ALLOWED_CLASSES = {
    "transformer": ("Cosmos3OmniTransformer",),
    "vae": ("AutoencoderKLWan",),
    "sound_tokenizer": ("Cosmos3AVAEAudioTokenizer",),
    # Cosmos3OmniPipeline serves UniPC; FlowMatchEuler runs the same flow-matching sigmas.
    "scheduler": ("UniPCMultistepScheduler", "FlowMatchEulerDiscreteScheduler"),
}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")  # torch.load / pickle formats: never read


def read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{what}: {path} is not valid JSON ({e}); restore it from the original checkpoint") from e
    if not isinstance(data, dict):
        raise ValueError(f"{what}: {path} must hold a JSON object")
    return data


def component_config(path: Path, name: str) -> dict:
    """The config of component ``name``, refused unless it names one of :data:`ALLOWED_CLASSES`."""
    file = path / name / CONFIG_FILES[name]
    if not file.is_file():
        raise FileNotFoundError(f"checkpoint={str(path)!r} is missing component {name!r}: expected {COMPONENTS[name]}")
    config = read_json(file, f"checkpoint component {name!r}")
    cls = config.get("_class_name")
    if cls not in ALLOWED_CLASSES[name]:
        raise ValueError(f"checkpoint component {name!r} names class {cls!r:.80} in {name}/{CONFIG_FILES[name]}; "
                         f"allowed: {', '.join(ALLOWED_CLASSES[name])}. Only these are loaded, so a config cannot "
                         f"send another class's loader to its files; set _class_name to one of them")
    return config


def _check_weights(path: Path, name: str) -> None:
    """Safetensors only: a ``.bin``/``.pt``/... weight file is a pickle, and unpickling runs code."""
    folder = path / name
    if not list(folder.glob("*.safetensors")):
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES) if folder.is_dir() else []
        found = (f"; its pickle weights {pickles[:5]} are refused (unpickling can run code): convert them once, "
                 f"in a process you trust, with save_pretrained(..., safe_serialization=True)") if pickles else ""
        raise FileNotFoundError(f"checkpoint={str(path)!r} is missing component {name!r}: expected "
                                f"{COMPONENTS[name]} (only safetensors weights are accepted){found}")
    for index in folder.glob("*.index.json"):  # diffusers loads every shard an index names, pickles included
        shards = read_json(index, f"checkpoint component {name!r}").get("weight_map")
        shards = shards.values() if isinstance(shards, dict) else [shards]
        bad = sorted({str(s)[:80] for s in shards if not str(s).endswith(".safetensors")})
        if bad:
            raise ValueError(f"checkpoint component {name!r}: {index.name} names non-safetensors shards {bad[:5]}; "
                             f"only *.safetensors shards are accepted: convert them with "
                             f"save_pretrained(..., safe_serialization=True)")


@contextmanager
def naming_component(path: Path, name: str):
    """A component that passed :func:`check_checkpoint` but does not load (a truncated weight
    file, a tokenizer file that is not JSON) raises ``ValueError`` naming the checkpoint and it."""
    try:
        yield
    except (OSError, ValueError) as error:  # not RuntimeError: out of memory is no fault of the files
        raise ValueError(f"checkpoint={str(path)!r}: component {name!r} does not load ({type(error).__name__}: "
                         f"{str(error)[:300]}); restore it from the original checkpoint") from error


def load_component(cls, path: Path, name: str, dtype):
    """Component ``name`` of ``path`` as ``cls``, refused unless the weights and its config agree:
    diffusers only warns about weights the config has no place for, or places the weights lack,
    and would run a config of 2 layers on a file of 4 as half a model."""
    with naming_component(path, name):
        module, info = cls.from_pretrained(path / name, torch_dtype=dtype, use_safetensors=True,
                                           output_loading_info=True)
    disagree = {key: sorted(map(str, info[key]))[:3] for key in ("missing_keys", "unexpected_keys", "mismatched_keys",
                                                               "error_msgs") if info.get(key)}
    if disagree:
        raise ValueError(f"checkpoint={str(path)!r}: the weights of component {name!r} do not fit its "
                         f"{CONFIG_FILES[name]} ({disagree}, at most 3 of each); use the config the weights were "
                         "saved with")
    return module


def check_checkpoint(path: str | Path) -> Path:
    """Vet a checkpoint directory before anything in it is loaded.

    ``FileNotFoundError`` names the first missing component (pickle weights count as missing:
    only safetensors are read); ``ValueError`` names a component whose config names a class
    outside :data:`ALLOWED_CLASSES`, whose shard index lists a non-safetensors file, or (the
    tokenizer) that asks for custom code.
    """
    path = Path(path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint={str(path)!r} is not a directory; pass a local diffusers-layout "
                                f"Cosmos 3 checkpoint (with {', '.join(COMPONENTS)}) or omit it for the embedded model")
    for name in ("transformer", "vae") + (("sound_tokenizer",) if (path / "sound_tokenizer").is_dir() else ()):
        _check_weights(path, name)
        component_config(path, name)
    tokenizer = path / "text_tokenizer"
    if not tokenizer.is_dir() or not any(tokenizer.iterdir()):
        raise FileNotFoundError(f"checkpoint={str(path)!r} is missing component 'text_tokenizer': "
                                f"expected {COMPONENTS['text_tokenizer']}")
    for file in ("tokenizer_config.json", "config.json"):  # AutoTokenizer reads both
        if (tokenizer / file).is_file() and "auto_map" in read_json(tokenizer / file, "component 'text_tokenizer'"):
            raise ValueError(f"checkpoint component 'text_tokenizer': text_tokenizer/{file} has an 'auto_map': it asks "
                             f"to run custom code shipped with the checkpoint, which is refused; use a tokenizer class "
                             f"built into transformers (remove 'auto_map' and set 'tokenizer_class')")
    component_config(path, "scheduler")
    return path
