/*
 * What `katana check` says beyond valid / invalid (katana(8) check): each node's security in its
 * summary line, and warnings about listen ports another process already holds.
 */
#ifndef AG_CHECK_REPORT_H
#define AG_CHECK_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "supervisor/supervisor.h"

/**
 * The security and transport of lowered inbound @p in, for check's node line, into @p buf
 * (@p cap bytes, always NUL-terminated): the cipher of a Shadowsocks node
 * ("aes-128-gcm", "2022-blake3-aes-256-gcm"; "..., v2ray-plugin" with its WebSocket, "over
 * TLS" with a certificate), else "REALITY", "TLS" or "no TLS", then ", Vision" for XTLS Vision
 * and ", gRPC", ", WebSocket" or ", HTTPUpgrade" for a transport other than TCP.
 */
void ag_check_describe(const sv_inbound_spec *in, char *buf, size_t cap);

/**
 * Warn on stderr when a socket of another process holds @p sa (an AF_INET/AF_INET6 address
 * with its port) for @p type (SOCK_STREAM or SOCK_DGRAM), as sv_addr_held_elsewhere() finds it:
 * "warning: WHAT ADDR:PORT (TCP): the port is held by pid N (prog)" ("another process" when
 * /proc does not name it). Ports held by a `katana run` of the same configuration file
 * @p config_path (the check of a reload, as katana.service's ExecReload runs it) are not warned
 * about. @p what names the setting ("api.listen", "node n1: listen").
 * @return true when it warned.
 */
bool ag_check_warn_held(const char *what, const struct sockaddr_storage *sa, int type,
                        const char *config_path);

/**
 * ag_check_warn_held() for @p ip (an IP literal; anything else is ignored) and @p port, TCP and,
 * when @p udp, UDP.
 */
void ag_check_warn_bind(const char *what, const char *ip, uint16_t port, bool udp,
                        const char *config_path);

#endif
