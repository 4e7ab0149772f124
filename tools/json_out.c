/*
 * json_out.c: JSON strings for the tools, escaped by json-c (json_out.h).
 */
#include "json_out.h"

#include <json-c/json.h>
#include <string.h>

#define JOUT_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* The first n bytes of s as a JSON string, or NULL when out of memory;
 * valid until json_object_put(*ret_obj). */
static const char *jout_escape(const char *s, size_t n, json_object **ret_obj)
{
	json_object *o = json_object_new_string_len(s, (int)n);

	*ret_obj = o;
	return o ? json_object_to_json_string_ext(o, JOUT_FLAGS) : NULL;
}

void jout_string(FILE *f, const char *s)
{
	json_object *o;
	const char *j = jout_escape(s, strlen(s), &o);

	fputs(j ? j : "null", f);
	json_object_put(o);
}

void jout_member(FILE *f, const char *key, const char *s, const char *sep)
{
	fprintf(f, "\"%s\": ", key);
	jout_string(f, s);
	fputs(sep, f);
}

void jout_string_buf(char *out, size_t cap, const char *s)
{
	size_t n = strlen(s);
	json_object *o;
	const char *j = jout_escape(s, n, &o);

	if (j && strlen(j) >= cap) {
		/* each byte of s makes at least one of j: dropping as many bytes
		 * of s as j is over makes it fit */
		size_t over = strlen(j) + 1 - cap;
		json_object_put(o);
		j = jout_escape(s, n > over ? n - over : 0, &o);
	}
	snprintf(out, cap, "%s", j && strlen(j) < cap ? j : "\"\"");
	json_object_put(o);
}
