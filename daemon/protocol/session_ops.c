/*
 * session_ops.c: the ListOps request (feedclient.ops(), feed_list_ops()):
 * every pipeline op this feedd knows, from core's own tables (the line
 * pipe_op_usage() writes for `feedd --list-ops`, and pipe_op_summary()'s
 * sentence), so a client lists what this daemon accepts, never a copy of
 * its own. Loop thread; answers at once (a few KiB, no I/O).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "pipeline_doc.h"
#include "session.h"

enum { SES_OP_LINE = 512 };  /* pipe_op_usage()'s longest line fits */

/* The ops' messages, their lines and the array pointing at them, in one
 * block: *ret_mem to free once the reply is sent. Returns the count. */
static int ses_ops_fill(Feed__OpInfo ***ret, void **ret_mem)
{
	uint32_t n = 0;

	while (pipe_op_summary(n))
		n++;
	size_t each = sizeof(Feed__OpInfo *) + sizeof(Feed__OpInfo) + SES_OP_LINE;
	uint8_t *mem = malloc(n ? n * each : 1);
	if (!mem)
		return -ENOMEM;
	Feed__OpInfo **list = (Feed__OpInfo **)(void *)mem;
	Feed__OpInfo *info = (Feed__OpInfo *)(void *)(mem + n * sizeof(*list));
	char *lines = (char *)(info + n);
	for (uint32_t k = 0; k < n; k++) {
		char *line = lines + (size_t)k * SES_OP_LINE;
		feed__op_info__init(&info[k]);
		if (pipe_op_usage(k, line, SES_OP_LINE) < 0)
			line[0] = '\0';
		info[k].name = (char *)pipe_kind_name((enum pipe_kind)k);
		info[k].usage = line;
		info[k].summary = (char *)pipe_op_summary(k);
		list[k] = &info[k];
	}
	*ret = list;
	*ret_mem = mem;
	return (int)n;
}

void ses_list_ops(struct ses *se, uint32_t id)
{
	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__OpList ops = FEED__OP_LIST__INIT;
	void *mem;
	int n = ses_ops_fill(&ops.ops, &mem);

	if (n < 0) {
		ses_error(se, id, -ENOMEM, "list ops: out of memory", SES_REFUSAL);
		return;
	}
	ops.n_ops = (size_t)n;
	reply.id = id;
	reply.body_case = FEED__REPLY__BODY_OPS;
	reply.ops = &ops;
	ses_send_fds(se, &reply, NULL, 0);
	free(mem);
}
