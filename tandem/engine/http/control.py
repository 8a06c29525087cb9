"""SGLang's control-plane routes: weight updates from disk, LoRA adapter loads and unloads, pausing and continuing generation,
flushing the prefix cache, aborting requests, and releasing / resuming memory (colocation). sglang-router does not forward these, so the
trainer / orchestrator call each engine directly. One route is tandem's own: /set_cpu_threads,
with which the orchestrator shares a CPU box between engines and trainer by phase."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tandem.engine.http.common import core_of, json_response, parse
from tandem.engine.http.models import (AbortReq, ContinueGenerationReqInput, LoadLoRAAdapterReqInput,
                                      PauseGenerationReqInput, ReleaseMemoryOccupationReqInput,
                                      ResumeMemoryOccupationReqInput, SetCpuThreadsReqInput,
                                      UnloadLoRAAdapterReqInput, UpdateWeightFromDiskReqInput)

router = APIRouter()


@router.post("/update_weights_from_disk")
async def update_weights_from_disk(request: Request) -> Response:
    obj = await parse(request, UpdateWeightFromDiskReqInput)
    res = await core_of(request).update_weights_from_disk(
        obj.model_path, obj.weight_version, abort_all_requests=obj.abort_all_requests,
        flush_cache=obj.flush_cache, load_format=obj.load_format)
    content = {"success": res.success, "message": res.message, "num_paused_requests": res.num_paused_requests}
    return json_response(content, 200 if res.success else 400)


@router.post("/load_lora_adapter")
async def load_lora_adapter(request: Request) -> Response:
    obj = await parse(request, LoadLoRAAdapterReqInput)
    res = await core_of(request).adapters.load(obj.lora_name, obj.lora_path)
    return json_response(res.__dict__, 200 if res.success else 400)


@router.post("/unload_lora_adapter")
async def unload_lora_adapter(request: Request) -> Response:
    obj = await parse(request, UnloadLoRAAdapterReqInput)
    res = await core_of(request).adapters.unload(obj.lora_name)
    return json_response(res.__dict__, 200 if res.success else 400)


@router.post("/pause_generation")
async def pause_generation(request: Request) -> Response:
    obj = await parse(request, PauseGenerationReqInput)
    await core_of(request).pause(obj.mode)
    return json_response({"message": "Generation paused successfully.", "status": "ok"})  # SGLang's whole answer


@router.post("/continue_generation")
async def continue_generation(request: Request) -> Response:
    await parse(request, ContinueGenerationReqInput)  # SGLang requires the body, {} at least
    await core_of(request).resume()
    return json_response({"message": "Generation continued successfully.", "status": "ok"})


@router.api_route("/flush_cache", methods=["GET", "POST"])
async def flush_cache(request: Request) -> Response:
    ok, msg = await core_of(request).flush_cache()
    return Response(content=msg + "\n", status_code=200 if ok else 400, media_type="text/plain")


@router.post("/abort_request")
async def abort_request(request: Request) -> Response:
    obj = await parse(request, AbortReq)
    await core_of(request).abort(obj.rid, abort_all=obj.abort_all)
    return Response(status_code=200)


@router.post("/set_cpu_threads")
async def set_cpu_threads(request: Request) -> Response:
    obj = await parse(request, SetCpuThreadsReqInput)
    threads = await core_of(request).engine_backend.set_cpu_threads(obj.threads)
    return json_response({"success": True, "threads": threads})


# SGLang answers both with 200 and no value (`null`) when done, and a failure with its
# _create_error_response body, {"error": {"message": ...}}, status 400.
async def _occupation(request: Request, model, change: str) -> Response:
    obj = await parse(request, model)  # a malformed body is a validation error, as every route's
    try:
        await getattr(core_of(request), change)(obj.tags)
    except Exception as err:  # noqa: BLE001 - SGLang turns any failure into this answer
        return json_response({"error": {"message": str(err)}}, 400)
    return json_response(None)


@router.api_route("/release_memory_occupation", methods=["GET", "POST"])
async def release_memory_occupation(request: Request) -> Response:
    return await _occupation(request, ReleaseMemoryOccupationReqInput, "release_memory_occupation")


@router.api_route("/resume_memory_occupation", methods=["GET", "POST"])
async def resume_memory_occupation(request: Request) -> Response:
    return await _occupation(request, ResumeMemoryOccupationReqInput, "resume_memory_occupation")
