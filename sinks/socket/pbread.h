/* A ServerFrame carrying a Delivery of events, read by hand into protobuf-c's structs. It is cdc
 * tail's hot path. protobuf-c's generic unpack took 60% of tail's CPU (perf, one 1,000,000-row
 * transaction), and tail can only start on a transaction at its commit. */
#ifndef CDC_PBREAD_H
#define CDC_PBREAD_H

#include <stddef.h>
#include <stdint.h>

#include "cdc/v1/subscriber.pb-c.h"
#include "decoder/base/arena.h"

/* socket_pb_read_delivery reads one shape only, the one cdc sends. That is a ServerFrame whose one field is
 * a Delivery holding events and nothing else, each field of a message at most once. Fields it does not
 * know are skipped, as protobuf-c keeps them aside. It declines (NULL) everything else, malformed
 * bytes included. socket_frame_decode_server() then gives the frame to protobuf-c, which decides. Where it
 * accepts, the events are those protobuf-c makes of the same bytes. tests/fuzz/fuzz_frame.c renders
 * both to JSON and compares.
 *
 * The frame is allocated in ar (released with arena_reset). NULL if declined. */
Cdc__V1__ServerFrame *socket_pb_read_delivery(const uint8_t *msg, size_t len, arena *ar);

#endif
