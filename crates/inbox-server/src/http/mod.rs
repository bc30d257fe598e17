//! The HTTP layer: extractors (authentication, validation, signatures), the one API error
//! type, middleware, the OpenAPI document and the routes. Nothing here holds a use case: a
//! handler extracts, makes one call into [`crate::ops`], and converts to the wire types.

pub mod a2a;
pub mod console;
pub mod cors;
pub mod extract;
pub mod middleware;
pub mod openapi;
pub mod origin;
pub mod routes;
pub mod signed;
pub mod sse_front;
pub mod stall;
pub mod stream_params;
