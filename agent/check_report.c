/* `katana check`'s node descriptions and port warnings (see check_report.h). */
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/check_report.h"
#include "supervisor/util/holder.h"

/* ------------------------------------------------------------------------------------------ */
/* node descriptions                                                                            */
/* ------------------------------------------------------------------------------------------ */

static const char *cipher_name(enum sv_ss_cipher c)
{
    switch (c) {
    case SV_SS_AES_128_GCM: return "aes-128-gcm";
    case SV_SS_AES_256_GCM: return "aes-256-gcm";
    case SV_SS_CHACHA20_POLY1305: return "chacha20-ietf-poly1305";
    case SV_SS_2022_AES_128_GCM: return "2022-blake3-aes-128-gcm";
    case SV_SS_2022_AES_256_GCM: return "2022-blake3-aes-256-gcm";
    case SV_SS_2022_CHACHA20_POLY1305: return "2022-blake3-chacha20-poly1305";
    }
    return "?";
}

void ag_check_describe(const sv_inbound_spec *in, char *buf, size_t cap)
{
    bool ss = in->protocol == SV_INBOUND_SHADOWSOCKS || in->protocol == SV_INBOUND_SS2022;
    bool tls = in->tls.cert != SV_CERT_NONE;
    const char *security = ss                               ? cipher_name(in->ss_cipher)
                           : in->reality.private_key != NULL ? "REALITY"
                           : tls                            ? "TLS"
                                                            : "no TLS";
    const char *transport = in->grpc.service_name != NULL ? ", gRPC"
                            : in->ws.path == NULL         ? ""
                            : ss && in->ws.mux            ? ", v2ray-plugin (WebSocket, Mux.Cool)"
                            : ss                          ? ", v2ray-plugin (WebSocket)"
                            : in->ws.httpupgrade          ? ", HTTPUpgrade"
                                                          : ", WebSocket";
    snprintf(buf, cap, "%s%s%s%s", security, in->reality.vision ? ", Vision" : "", transport,
             ss && tls ? " over TLS" : "");
}

/* ------------------------------------------------------------------------------------------ */
/* ports held                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* The configuration file of `katana run` process @p pid: its -c / --config argument, resolved
 * against its working directory, into @p out. false when it is no such process or /proc
 * does not tell. */
static bool run_config_of(long pid, char *out, size_t cap)
{
    char path[64], args[4096];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    size_t n = fread(args, 1, sizeof args - 1, f);
    fclose(f);
    args[n] = '\0';
    const char *file = NULL;
    bool run = false;
    for (const char *a = args, *prev = ""; a < args + n; prev = a, a += strlen(a) + 1) {
        run = run || strcmp(a, "run") == 0;
        if (strcmp(prev, "-c") == 0 || strcmp(prev, "--config") == 0)
            file = a;
        else if (strncmp(a, "--config=", 9) == 0)
            file = a + 9;
    }
    if (!run || file == NULL)
        return false;
    if (file[0] == '/')
        snprintf(out, cap, "%s", file);
    else
        snprintf(out, cap, "/proc/%ld/cwd/%s", pid, file);
    return true;
}

/* Whether holder @p who ("pid N (katana)") is a `katana run` of @p config_path (same file). */
static bool held_by_this_config(const char *who, const char *config_path)
{
    long pid = 0;
    char comm[32] = "", theirs[4200];
    struct stat a, b;
    if (sscanf(who, "pid %ld (%31[^)])", &pid, comm) != 2 || strcmp(comm, "katana") != 0)
        return false;
    return run_config_of(pid, theirs, sizeof theirs) && stat(theirs, &a) == 0 &&
           stat(config_path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

bool ag_check_warn_held(const char *what, const struct sockaddr_storage *sa, int type,
                        const char *config_path)
{
    char who[128], ip[INET6_ADDRSTRLEN] = "?";
    if (sv_addr_held_elsewhere((const struct sockaddr *)sa, type, who, sizeof who) == 0 ||
        held_by_this_config(who, config_path))
        return false;
    bool v6 = sa->ss_family == AF_INET6;
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)sa;
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)sa;
    inet_ntop(sa->ss_family, v6 ? (const void *)&a6->sin6_addr : (const void *)&a4->sin_addr,
              ip, sizeof ip);
    fprintf(stderr, "warning: %s %s%s%s:%u (%s): the port is held by %s\n", what,
            v6 ? "[" : "", ip, v6 ? "]" : "", (unsigned)ntohs(v6 ? a6->sin6_port : a4->sin_port),
            type == SOCK_DGRAM ? "UDP" : "TCP", who);
    return true;
}

void ag_check_warn_bind(const char *what, const char *ip, uint16_t port, bool udp,
                        const char *config_path)
{
    struct sockaddr_storage sa = {0};
    struct sockaddr_in *a4 = (struct sockaddr_in *)&sa;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&sa;
    if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
    } else if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
    } else {
        return;
    }
    ag_check_warn_held(what, &sa, SOCK_STREAM, config_path);
    if (udp)
        ag_check_warn_held(what, &sa, SOCK_DGRAM, config_path);
}
