#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "supervisor/util/log.h"

int sv_log_threshold = SV_LOG_INFO;

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

/* A terminal gets each line's UTC time first; a file, a pipe or the journal (which stamps
 * lines itself) gets the bare line. Decided once: -1 until the first line. */
static int stamp_lines = -1;

static int line_stamp(char *buf, size_t cap)
{
    if (stamp_lines < 0)
        stamp_lines = isatty(STDERR_FILENO) ? 1 : 0;
    if (!stamp_lines)
        return 0;
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    int m = n == 0 ? -1 : snprintf(buf + n, cap - n, ".%03ldZ ", (long)(tv.tv_usec / 1000));
    return m < 0 ? 0 : (int)n + m;
}

void sv_log_write(int level, const char *module, const char *fmt, ...)
{
    char line[1024];
    if (level < 0 || level > SV_LOG_TRACE)
        level = SV_LOG_ERROR;
    int t = line_stamp(line, 32);
    int n = snprintf(line + t, sizeof line - (size_t)t, "%s %s ", level_names[level], module);
    if (n < 0)
        return;
    n += t;
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
