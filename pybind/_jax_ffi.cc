/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redist.jax's XLA FFI handlers (typed API, xla/ffi/api/ffi.h of the jaxlib that compiles it):
 * the custom call `redist_redistribute` runs one planned redistribution of redist.jax's plan cache
 * on the buffers XLA hands over. Built by redist/_jax_build.py at first use, once per jaxlib
 * version (jaxlib's headers are not in a build-isolation environment, so not at install).
 *
 * The call takes (operand, token) and returns (result, token): the token is JAX's ordered effect,
 * so the custom calls of one process run in program order and never two at once. Its attribute
 * `entry` names the planned object (redist.jax's table); the handler passes it, the buffers and
 * (on GPU) XLA's stream to the function redist.jax installed (redist_jax_set_execute), which runs
 * the exchange collectively (the host backend's path, compiled replays included, on CPU; the CUDA
 * backend on XLA's stream on GPU) and returns 0, or 1 with its message: the same redist error on
 * every rank, which the handler returns to XLA as its error (jax raises it).
 */
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

extern "C" {
/* entry, operand, result, stream (0 on CPU), bytes of the operand and of the result, message, room */
typedef int32_t (*redist_jax_execute_t)(int64_t, uintptr_t, uintptr_t, uintptr_t, int64_t, int64_t, char *,
                                        int64_t);
}

static std::atomic<redist_jax_execute_t> redist_jax_execute{nullptr};

extern "C" __attribute__((visibility("default"))) void redist_jax_set_execute(uintptr_t fn)
{
    redist_jax_execute.store(reinterpret_cast<redist_jax_execute_t>(fn));
}

/* What redist.jax compiled this library against (its cache key checks it). */
extern "C" __attribute__((visibility("default"))) int32_t redist_jax_abi_version(void)
{
    return 1;
}

static ffi::Error redist_jax_run(int64_t entry, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, uintptr_t stream)
{
    redist_jax_execute_t fn = redist_jax_execute.load();
    if (fn == nullptr)
        return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                          "redist.jax: the handler runs in a process where redist.jax was not imported");
    char msg[4096];
    msg[0] = '\0';
    int32_t rc = fn(entry, reinterpret_cast<uintptr_t>(x.untyped_data()), reinterpret_cast<uintptr_t>(y->untyped_data()),
                    stream, static_cast<int64_t>(x.size_bytes()), static_cast<int64_t>(y->size_bytes()), msg,
                    static_cast<int64_t>(sizeof msg));
    if (rc != 0) {
        msg[sizeof msg - 1] = '\0';
        return ffi::Error(ffi::ErrorCode::kInternal, std::string(msg));
    }
    return ffi::Error::Success();
}

static ffi::Error redist_jax_cpu(ffi::AnyBuffer x, ffi::Token, ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::Token>,
                                 int64_t entry)
{
    return redist_jax_run(entry, x, y, 0);
}

static ffi::Error redist_jax_cuda(void *stream, ffi::AnyBuffer x, ffi::Token, ffi::Result<ffi::AnyBuffer> y,
                                  ffi::Result<ffi::Token>, int64_t entry)
{
    return redist_jax_run(entry, x, y, reinterpret_cast<uintptr_t>(stream));
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(RedistJaxCpu, redist_jax_cpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Token>()
                                  .Attr<int64_t>("entry"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(RedistJaxCuda, redist_jax_cuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void *>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::Token>()
                                  .Attr<int64_t>("entry"));
