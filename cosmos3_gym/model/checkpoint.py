"""Vetting a checkpoint folder before anything in it loads, and loading its components strictly.

A Cosmos 3 checkpoint in diffusers' layout is data that picks code: a config's ``_class_name``
chooses whose loader runs, a ``.bin`` weight file is a pickle, a tokenizer may ask for custom
code. Only allow-listed classes, safetensors weights and built-in tokenizers get through, and
weights that do not fit their config are refused instead of half-loaded.
"""

from __future__ import annotations

import json
import math
import struct
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
# Config fields that count stacked layers, and the weight names that number them: the count must be
# the weights' (a config of 10**9 layers would otherwise be built layer by layer until memory ran out).
LAYER_COUNTS = {"transformer": {"num_hidden_layers": "layers."}}
# No integer in a model config (a layer count, a width, a vocabulary) is this large.
MAX_CONFIG_INT = 2 ** 24
MAX_HEADER_BYTES = 100 * 2 ** 20  # safetensors' own limit on a file's JSON header


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


def weight_shapes(path: Path, name: str) -> dict[str, tuple[int, ...]]:
    """Every tensor's name and shape in component ``name``'s ``*.safetensors`` files, read from
    their headers alone (8 bytes of length, then JSON): no tensor is loaded. A header that does not
    parse raises ``ValueError`` naming the component (the file would not load either)."""
    shapes = {}
    for file in sorted((path / name).glob("*.safetensors")):
        with naming_component(path, name):
            with open(file, "rb") as handle:
                raw = handle.read(8)
                length = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
                size = file.stat().st_size
                if not 0 < length <= min(MAX_HEADER_BYTES, size - 8):
                    raise OSError(f"Unable to load weights from {file.name}: its safetensors header length "
                                  f"{length} does not fit the file's {size} bytes (truncated or not safetensors)")
                try:
                    header = json.loads(handle.read(length))
                except ValueError as error:
                    raise OSError(f"Unable to load weights from {file.name}: its safetensors header is not "
                                  f"JSON ({error})") from None
            if not isinstance(header, dict):
                raise OSError(f"Unable to load weights from {file.name}: its safetensors header is not an object")
            for key, entry in header.items():
                shape = entry.get("shape") if isinstance(entry, dict) else None
                if key != "__metadata__" and isinstance(shape, list) and all(
                        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
                    shapes[key] = tuple(shape)
                elif key != "__metadata__":
                    raise OSError(f"Unable to load weights from {file.name}: tensor {key[:80]!r} has no valid shape")
    return shapes


def _layer_index(key: str, prefix: str) -> int | None:
    """``N`` of a weight name ``{prefix}N.…`` (``layers.3.mlp.up_proj.weight`` -> 3), else ``None``."""
    head, _, rest = key[len(prefix):].partition(".") if key.startswith(prefix) else ("", "", "")
    return int(head) if head.isdigit() and rest else None


def check_config_fits_weights(path: Path, name: str, config: dict, shapes: dict | None = None) -> None:
    """Refuse, before any module is built, a config its weights cannot fill. ``ValueError`` names
    the component, the field and its value:

    * a layer count (:data:`LAYER_COUNTS`, e.g. ``num_hidden_layers``) must be an int equal to the
      number of layers the weight names hold (``layers.0.`` ... ``layers.{n-1}.``);
    * a count of stacked modules (a field ending in ``_layers`` or ``_blocks``) cannot exceed the
      number of weight tensors (each layer or block holds at least one);
    * every integer (lists of them too) is at most :data:`MAX_CONFIG_INT` in magnitude.

    Only the safetensors headers are read (:func:`weight_shapes`), never a tensor.
    """
    shapes = weight_shapes(path, name) if shapes is None else shapes
    file, where = CONFIG_FILES[name], f"checkpoint={str(path)!r}: component {name!r} has"
    fix = "use the config the weights were saved with"
    for field, prefix in LAYER_COUNTS.get(name, {}).items():
        if field not in config:
            continue
        value = config[field]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where} {field}={value!r:.80} in {name}/{file}; expected an integer, the number of "
                             f"layers its weights hold; {fix}")
        by_layer = {}
        for key in shapes:
            index = _layer_index(key, prefix)
            if index is not None:
                by_layer.setdefault(index, []).append(key)
        held = sorted(by_layer)
        contiguous = held == list(range(len(held)))
        if contiguous and value == len(held):  # (never range(value): the value may be 10**9)
            continue
        disagree = {}
        missing = next((i for i in range(min(value, len(held) + 1)) if i not in by_layer), None)
        if missing is not None:  # that layer's keys, as diffusers would name them (from the first layer held)
            template = sorted(by_layer[held[0]]) if held else [f"{prefix}0.*"]
            disagree["missing_keys"] = [f"{prefix}{missing}.{key[len(prefix):].partition('.')[2]}"
                                        for key in template[:3]]
        unexpected = sorted(key for i in held if i >= value for key in by_layer[i])
        if unexpected:
            disagree["unexpected_keys"] = unexpected[:3]
        shown = (f"{prefix}0. to {prefix}{len(held) - 1}." if contiguous and held
                 else f"{prefix}N. for N in {held[:5]}{' ...' if len(held) > 5 else ''}")
        raise ValueError(f"checkpoint={str(path)!r}: the weights of component {name!r} do not fit its {file} "
                         f"({disagree}, at most 3 of each): {name}/{file} has {field}={value} but the weights hold "
                         f"{len(held)} layers ({shown}); set {field} to {len(held)}, or {fix}")
    for field, value in config.items():
        for number in value if isinstance(value, list) else [value]:
            if not isinstance(number, int) or isinstance(number, bool):
                continue
            if abs(number) > MAX_CONFIG_INT:
                raise ValueError(f"{where} {field}={value!r:.80} in {name}/{file}; integer fields must be at most "
                                 f"{MAX_CONFIG_INT} in magnitude (no width, depth or vocabulary is larger); {fix}")
            if field.endswith(("_layers", "_blocks")) and number > len(shapes):
                raise ValueError(f"{where} {field}={value!r:.80} in {name}/{file}, more layers or blocks than its "
                                 f"weights hold tensors ({len(shapes)}); {fix}")


def check_built_size(cls, path: Path, name: str, config: dict, shapes: dict) -> None:
    """Refuse a config that implies more parameters than the weights hold, before anything is
    allocated: the module is built on the meta device (shapes only, no memory) and its parameter
    count compared with the headers'. ``ValueError`` names the component, the first tensor that
    differs and the config fields whose values its shape holds; a config that does not build names
    the fields ``cls`` takes as integers that hold something else."""
    import inspect
    import types

    import torch

    file, fix = f"{name}/{CONFIG_FILES[name]}", "use the config the weights were saved with"
    parameters = inspect.signature(cls.__init__).parameters.values()
    try:
        with torch.device("meta"):
            module = cls.from_config(config)
    except Exception as error:  # a negative width, a float count, an odd head split: no such module
        def not_int(parameter) -> bool:
            annotation, value = parameter.annotation, config[parameter.name]
            optional = isinstance(annotation, types.UnionType) and set(annotation.__args__) == {int, type(None)}
            return (annotation is int or optional) and not (value is None and optional) \
                and (isinstance(value, bool) or not isinstance(value, int))

        fields = [f"{p.name}={config[p.name]!r:.40}" for p in parameters if p.name in config and not_int(p)]
        hint = f"; {', '.join(fields)} should be {'an integer' if len(fields) == 1 else 'integers'}" if fields else ""
        raise ValueError(f"checkpoint={str(path)!r}: component {name!r}: {file} does not describe a "
                         f"{cls.__name__} ({type(error).__name__}: {str(error)[:300]}){hint}; {fix}") from error
    built = {key: tuple(tensor.shape) for key, tensor in module.state_dict().items()}
    implied, held = sum(map(math.prod, built.values())), sum(map(math.prod, shapes.values()))
    if implied <= held:
        return
    differ = next(((key, built[key], shapes.get(key)) for key in built if built[key] != shapes.get(key)), None)
    detail = ""
    if differ is not None:
        key, want, have = differ
        if have is None:  # a layer or block the weights lack: a count or a switch in the config
            detail = f"; the first that differs, {key!r}, is a tensor the config builds and the weights lack"
        else:  # a width: name the config fields holding the sizes the weights do not have
            sizes = set(want) - set(have)
            fields = [f"{f}={v}" for f, v in config.items() if isinstance(v, int) and not isinstance(v, bool)
                      and v in sizes]
            detail = (f"; the first that differs, {key!r}, is {list(want)} by the config and {list(have)} in the "
                      f"weights{' (config ' + ', '.join(fields) + ')' if fields else ''}")
    absent = [f"{p.name}={p.default!r}" for p in parameters if p.name not in config and isinstance(p.default, int)
              and not isinstance(p.default, bool)]
    if absent:
        detail += f"; fields the config leaves out take {cls.__name__}'s defaults ({', '.join(absent[:5])})"
    raise ValueError(f"checkpoint={str(path)!r}: component {name!r}: {file} implies {implied} parameters but its "
                     f"weights hold {held}{detail}; {fix}")


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
    config, shapes = component_config(path, name), weight_shapes(path, name)
    check_config_fits_weights(path, name, config, shapes)  # a config of 10**9 layers: refused here, from headers
    check_built_size(cls, path, name, config, shapes)  # no more parameters than the weights hold
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
    outside :data:`ALLOWED_CLASSES`, whose shard index lists a non-safetensors file, whose config
    does not fit its weights' headers (:func:`check_config_fits_weights`), or (the tokenizer)
    that asks for custom code.
    """
    path = Path(path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint={str(path)!r} is not a directory; pass a local diffusers-layout "
                                f"Cosmos 3 checkpoint (the folder of its model_index.json, with "
                                f"{', '.join(name for name in COMPONENTS if name != 'sound_tokenizer')}, and "
                                f"sound_tokenizer for sound), or leave it out for the env's own model (the embedded tiny "
                                f"model; Cosmos3PushT-v0's shipped PushT model)")
    for name in ("transformer", "vae") + (("sound_tokenizer",) if (path / "sound_tokenizer").is_dir() else ()):
        _check_weights(path, name)
        check_config_fits_weights(path, name, component_config(path, name))
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
