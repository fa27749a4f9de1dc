/*
 * Fuzz harness: `katana import`'s readers (agent/import*.c, issue 32) on outside bytes. The
 * first byte picks the agent (0 v2bx: V2bX's JSON with comments; 1 xrayr and 2 xboard-node:
 * YAML through libyaml); the rest is the config file. No other file is read (base_dir NULL).
 * Checks:
 *  - the result is 0 or one of the documented errors, and an error carries a message;
 *  - every warning is one non-empty line;
 *  - a configuration given back has nodes, and katana's own config parser accepts it (the
 *    promise of ag_import_text(): what import writes, katana check reads).
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "agent/agent_config.h"
#include "agent/import.h"
#include "tests/fuzz/fuzz.h"

static void on_warning(void *arg, const char *line)
{
    (*(unsigned *)arg)++;
    FUZZ_CHECK(line[0] != '\0' && strchr(line, '\n') == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const agents[] = {"v2bx", "xrayr", "xboard-node"};
    if (size < 1)
        return 0;
    const char *agent = agents[data[0] % 3];
    unsigned warnings = 0;
    json_t *cfg = NULL;
    sv_error err = {0};
    int rc = ag_import_text(agent, (const char *)data + 1, size - 1, NULL, "/tmp/katana.db",
                            on_warning, &warnings, &cfg, &err);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -ENOENT || rc == -ENOMEM);
    if (rc != 0) {
        FUZZ_CHECK(cfg == NULL && err.msg[0] != '\0');
        return 0;
    }
    FUZZ_CHECK(json_array_size(json_object_get(cfg, "nodes")) > 0);
    char *text = json_dumps(cfg, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    ag_config c;
    sv_error e = {0};
    FUZZ_CHECK(ag_config_parse(text, strlen(text), NULL, &c, &e) == 0);
    ag_config_free(&c);
    free(text);
    json_decref(cfg);
    return 0;
}
