/*
 * client_cuda.c: the capability query (feed/gpu.h, feed_gpu_query): the
 * facts the run-time driver loader (kernels/cudrv.h) found, in the public
 * struct.
 *
 * Threads: any; the first call loads the driver (cudrv_get). Never prints.
 */
#include <errno.h>
#include <string.h>

#include "client_internal.h"
#include "cudrv.h"
#include "feed/gpu.h"

_Static_assert(FEED_GPU_MAX_DEVICES == CUDRV_MAX_DEVICES, "one device table size");

FEED_API int feed_gpu_query(struct feed_gpu_info *ret)
{
	if (!ret)
		return -EINVAL;
	const struct cudrv_info *in = &cudrv_get()->info;
	struct feed_gpu_info out = {
		.usable = in->usable,
		.kernels = in->kernels,
		.ipc = in->ipc,
		.driver_version = in->driver_version,
		.driver_needed = in->driver_needed,
		.num_devices = in->num_devices,
	};
	for (uint32_t i = 0; i < in->num_devices && i < FEED_GPU_MAX_DEVICES; i++) {
		const struct cudrv_device *d = &in->devices[i];
		memcpy(out.devices[i].name, d->name, sizeof(out.devices[i].name));
		out.devices[i].cc_major = d->cc_major;
		out.devices[i].cc_minor = d->cc_minor;
		memcpy(out.devices[i].uuid, d->uuid, sizeof(out.devices[i].uuid));
	}
	memcpy(out.reason, in->reason, sizeof(out.reason));
	memcpy(out.ipc_reason, in->ipc_reason, sizeof(out.ipc_reason));
	*ret = out;
	return 0;
}
