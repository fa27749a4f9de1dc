/*
 * Mux.Cool server side (PROTOCOLS.md §7), sans-I/O: the frame codec that VLESS and VMess cores
 * run on their body once the client asked for command 3. Each mux session is one stream of the
 * protocol-core seam (proto.h): stream = session ID.
 *
 * Wired for VLESS and VMess: the runtime (conn.c) keeps a table of sub-flows on a connection whose core
 * said "multiplexed" (supervisor/README.md "Mux.Cool").
 *
 * Frame: u16be meta_len | metadata | (option & 0x01) u16be data_len | data. Metadata: session
 * ID u16be, status (1 New, 2 Keep, 3 End, 4 KeepAlive), option (1 data, 2 error), and for New
 * the network (1 TCP, 2 UDP) and an address in style B (§1.1). XUDP (PROTOCOLS-2.md §5): a New
 * UDP frame may end with an 8-byte GlobalID (given with SV_FX_OPEN: the runtime re-attaches
 * the association that carries it, xudp.h), and a Keep frame of a UDP session with
 * network 2 and the address of its datagram, both ways. The decoder consumes a frame's
 * header whole, then its data as it comes (TCP data is forwarded piecewise; a UDP datagram is
 * delivered whole), so it never needs more than SV_MUX_CARRY_MAX bytes buffered although data
 * blocks go up to 65535 bytes.
 */
#ifndef SV_PROTO_MUX_H
#define SV_PROTO_MUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/proto/core.h"
#include "supervisor/proto/proto.h"

enum sv_mux_status { SV_MUX_NEW = 1, SV_MUX_KEEP, SV_MUX_END, SV_MUX_KEEPALIVE };

#define SV_MUX_META_MAX 512      /**< longer metadata is a protocol error (§7.3) */
#define SV_MUX_SESSIONS_MAX 128  /**< open sessions per connection; a New beyond gets End */
/** Largest UDP datagram either way: v2ray 4.34's reader refuses more than 2048 bytes (§7.3);
 *  a longer datagram from the client is read and dropped. */
#define SV_MUX_UDP_PAYLOAD_MAX 2048
/** Largest data block of one frame (the u16be length). */
#define SV_MUX_DATA_MAX 65535
/** Most bytes sv_mux_feed() leaves unconsumed: a frame header, or a whole datagram. */
#define SV_MUX_CARRY_MAX (2 + SV_MUX_META_MAX + 2 > SV_MUX_UDP_PAYLOAD_MAX                        \
                              ? 2 + SV_MUX_META_MAX + 2 : SV_MUX_UDP_PAYLOAD_MAX)
/** Bytes of an End frame (sv_mux_frame_end). */
#define SV_MUX_END_LEN 6

typedef struct sv_mux sv_mux;

/** A decoder for one connection (about 2 KiB). @return it, or NULL when out of memory. */
sv_mux *sv_mux_new(void);
/** Free @p m (NULL-safe). */
void sv_mux_free(sv_mux *m);

/**
 * Decode client frames from @p p (@p n bytes) and append their effects to @p fx (not emptied;
 * it stops when fewer than 3 effect slots are left): New → SV_FX_OPEN (stream = session ID,
 * dest with network TCP or UDP, a New UDP frame's GlobalID in global_id); data of a TCP
 * session → SV_FX_TO_OUTBOUND pointing into @p p; a UDP session's data block → one
 * SV_FX_DATAGRAM to the address its Keep frame carries (XUDP, PROTOCOLS-2.md §5.2), else to
 * the session's destination (dropped when above
 * SV_MUX_UDP_PAYLOAD_MAX); End → SV_FX_CLOSE. A Keep for an unknown session, and a New
 * beyond SV_MUX_SESSIONS_MAX sessions, get an End frame back (SV_FX_TO_CLIENT, data in @p m,
 * valid until the next call: the plain frame, which a core whose downstream is not the bare
 * frames writes as its own with sv_mux_answers_write()) and their data is dropped; KeepAlive data is
 * dropped.
 * @return bytes consumed (0 = need more: call again with more appended; never more than
 *         SV_MUX_CARRY_MAX bytes are left), or -EPROTO for metadata shorter than 4 bytes or
 *         longer than SV_MUX_META_MAX, an unknown status, network or address, or a New for a
 *         session that is open: the whole connection ends (effects already appended stand).
 */
ssize_t sv_mux_feed(sv_mux *m, uint8_t *p, size_t n, sv_effects *fx);

/**
 * Writes one End answer of the decoder (@p frame, @p len bytes: a plain Mux.Cool End frame) as
 * the core's next downstream bytes at @p out (at most @p cap): after its response header if
 * that has not gone out, sealed or padded as its wire format asks. @return bytes written or a
 * negative errno.
 */
typedef ssize_t (*sv_mux_answer_fn)(void *core, const uint8_t *frame, size_t len, uint8_t *out,
                                    size_t cap);

/**
 * The End answers sv_mux_feed() put among @p fx->v[first ...] (bare SV_FX_TO_CLIENT effects),
 * each written by @p write (with @p core) in order into one buffer of @p answer_max bytes per
 * answer, and moved into one SV_FX_TO_CLIENT at fx->v[first], ahead of the call's other effects:
 * applying those may have the runtime write more of the downstream (a sub-flow's End from
 * frame()), which must follow. For every core whose downstream is not the bare frames (VMess's
 * sealed chunks, VLESS's response header and Vision padding).
 * @param buf  set to the malloc'd buffer the new effect points into (NULL when there was no
 *             answer); the caller frees it once the effects are applied (at its next feed).
 * @return 0; or -ENOMEM or @p write's error, with fx->n = first (none of the call's effects may
 *         be applied: the connection fails).
 */
int sv_mux_answers_write(sv_effects *fx, unsigned first, size_t answer_max, sv_mux_answer_fn write,
                         void *core, uint8_t **buf);

/**
 * Decode one step of sv_mux_feed(): one frame header (effects as sv_mux_feed's), or the next
 * piece of the current data block (one SV_FX_TO_OUTBOUND or SV_FX_DATAGRAM). For a caller that
 * runs an inner protocol on each session's bytes (Shadowsocks over Mux.Cool, ss_mux.h): @p fx
 * needs 2 free slots; an End answer's bytes stay valid until the next call on @p m.
 * @return bytes consumed (0 = need more), or -EPROTO as sv_mux_feed().
 */
ssize_t sv_mux_step(sv_mux *m, uint8_t *p, size_t n, sv_effects *fx);

/**
 * Bytes of the current TCP data block still to come, with its session in *@p id; 0 when the
 * next bytes are a frame header (or data that is dropped or a datagram).
 */
size_t sv_mux_data_left(const sv_mux *m, uint16_t *id);

/**
 * Give back the last @p k bytes of the TCP data piece the previous sv_mux_step() delivered (the
 * caller did not take them): the next step delivers them again. Only right after that step.
 */
void sv_mux_unread(sv_mux *m, size_t k);

/**
 * Forget session @p id (its outbound ended; the runtime sends its End frame): a later Keep for
 * it gets an End back. Unknown ids are ignored.
 */
void sv_mux_session_gone(sv_mux *m, uint16_t id);

/** Most wire bytes sv_mux_frame_data() writes for @p len payload bytes. */
size_t sv_mux_frame_max(size_t len);

/**
 * Frame @p len bytes of session @p id's outbound for the client as Keep frames with data (blocks
 * of at most SV_MUX_DATA_MAX bytes; one block per datagram for UDP, so a UDP caller passes one
 * datagram of at most SV_MUX_UDP_PAYLOAD_MAX bytes). @p in and @p out may not overlap.
 * @return wire length, or -EMSGSIZE when @p cap < sv_mux_frame_max(len).
 */
ssize_t sv_mux_frame_data(uint16_t id, const uint8_t *in, size_t len, uint8_t *out, size_t cap);

/** Most bytes of a datagram's Keep frame header (sv_mux_frame_datagram_head). */
#define SV_MUX_DGRAM_HEAD_MAX (2 + 5 + SV_DEST_WIRE_MAX + 2)

/**
 * Write the header of a Keep frame of UDP session @p id carrying one datagram of @p len
 * (<= SV_MUX_DATA_MAX) bytes from @p from: network 2 and @p from's address in style B follow
 * the option, as XUDP's full-cone replies need (PROTOCOLS-2.md §5.3 item 6; Xray and sing-box
 * clients read it, v2ray 4.34's reader skips metadata past the option).
 * @param out  SV_MUX_DGRAM_HEAD_MAX bytes
 * @return the header's length; the datagram follows it.
 */
size_t sv_mux_frame_datagram_head(uint16_t id, const sv_dest *from, size_t len, uint8_t *out);

/** Bytes of a Keep frame's header (sv_mux_frame_head). */
#define SV_MUX_HEAD_LEN 8

/**
 * Write the header of a Keep frame of session @p id announcing @p len (<= SV_MUX_DATA_MAX) data
 * bytes, for a caller that frames the data itself (VMess seals it in place of a copy).
 * @param out  SV_MUX_HEAD_LEN bytes
 * @return SV_MUX_HEAD_LEN.
 */
size_t sv_mux_frame_head(uint16_t id, size_t len, uint8_t *out);

/**
 * Write the End frame of session @p id (option 0x02 when @p error: the outbound failed).
 * @param out  SV_MUX_END_LEN bytes
 * @return SV_MUX_END_LEN.
 */
size_t sv_mux_frame_end(uint16_t id, bool error, uint8_t *out);

#endif
