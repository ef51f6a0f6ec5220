/* The frame that called the function whose PY_START callback is running (see
 * _callerframe.c). */
#ifndef TRACKGEN_CALLERFRAME_H
#define TRACKGEN_CALLERFRAME_H

#include <Python.h>
#include <frameobject.h>

/* The frame object of the caller of the running function `code`, as
 * PyFrame_GetBack(PyEval_GetFrame()) finds it where the running function's code is
 * `code` (a new reference), or NULL where it has none (an error may be set: a frame
 * object that could not be made). */
PyFrameObject *caller_frame(PyObject *code);

/* 1 where caller_frame reads the interpreter's frame chain (this build knows its
 * layout), 0 where it takes the public route alone. */
extern const int reads_frame_chain;

#endif
