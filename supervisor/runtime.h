/*
 * Every internal header of the running supervisor at once, for the files that use most of them
 * (udp.c) and the unit tests. A runtime file includes the headers it uses instead: bounds.h,
 * plane.h, worker.h, hints.h, scan.h, conn.h, connector.h, admission.h, udp.h, flow.h.
 */
#ifndef SV_RUNTIME_H
#define SV_RUNTIME_H

#include "supervisor/admission.h"
#include "supervisor/bounds.h"
#include "supervisor/conn.h"
#include "supervisor/connector.h"
#include "supervisor/flow.h"
#include "supervisor/hints.h"
#include "supervisor/plane.h"
#include "supervisor/scan.h"
#include "supervisor/udp.h"
#include "supervisor/worker.h"

#endif
