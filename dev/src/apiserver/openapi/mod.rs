//! The OpenAPI documents the server publishes: `/openapi/v2` and `/openapi/v3`, for the built-in kinds and
//! every CRD.

pub mod definitions;
