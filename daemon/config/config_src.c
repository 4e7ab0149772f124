/*
 * config_src.c: what every part of config loading shares about the text
 * it reads: refusals that name the file, the line and the key path
 * (cfg_key_err), going on past an error when the caller collects them all
 * (cfg_err_keep), and the names a config may give (cfg_name_ok). Runs
 * where the config loads: main() before the loop starts, a worker at each
 * reload. Never logs.
 *
 * The other config*.c files call it; it calls only config_yaml.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "config_raw.h"

/* Refusal of the value at key path: "FILE:LINE: KEY: what". */
int cfg_key_err(const struct cfg_src *src, struct feed_err *err, const char *key,
		const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	feed_err_vset(err, -EINVAL, fmt, ap);
	va_end(ap);
	unsigned line = src->file ? cfg_yaml_line(src->text, src->len, key, false) : 0;
	if (line)
		feed_err_prefix(err, "%s:%u: %s", src->file, line, key);
	else
		feed_err_prefix(err, "%s: %s", src->file ? src->file : "config", key);
	return -EINVAL;
}

bool cfg_err_keep(const struct cfg_src *src, int r, const struct feed_err *err)
{
	struct cfg_errs *all = src->all;

	if (!all || r == -ENOMEM)
		return false;
	if (all->n < CFG_ERRS_MAX)
		snprintf(all->msg[all->n++], sizeof(all->msg[0]), "%s", err->msg);
	else
		all->more++;
	return true;
}

bool cfg_name_ok(const char *name)
{
	size_t n = strlen(name);
	return n >= 1 && n < CFG_NAME_MAX &&
	       strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}
