#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "supervisor/util/log.h"

int sv_log_threshold = SV_LOG_INFO;

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

void sv_log_write(int level, const char *module, const char *fmt, ...)
{
    char line[1024];
    if (level < 0 || level > SV_LOG_TRACE)
        level = SV_LOG_ERROR;
    int n = snprintf(line, sizeof line, "%s %s ", level_names[level], module);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

int sv_log_level_parse(const char *name)
{
    for (int i = 0; i <= SV_LOG_TRACE; i++)
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    if (strcasecmp(name, "warning") == 0)
        return SV_LOG_WARN;
    return -1;
}
