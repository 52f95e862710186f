//! Moving values between layouts: lanes and pieces, bool masks of different widths, and the
//! 2x integer widening and narrowing steps every vector conversion is built from.

use rustc_hash::FxHashMap as HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{ConstantData, Endianness, InstBuilder, MemFlagsData, Type, Value, types};
use cranelift_module::Module;
use ir::DType;

use super::func::FnTx;
use super::types::{Val, is_pieces, lanes_per_piece, mask_type, piece_type};

impl<M: Module> FnTx<'_, '_, '_, M> {
    /// Every lane as a scalar value; bool lanes come out as I8 0 or 1.
    pub fn lanes(&mut self, v: &Val, dtype: DType) -> Vec<Value> {
        match v {
            Val::Lanes(lanes) => lanes.clone(),
            Val::Pieces(pieces) => {
                let mut out = Vec::with_capacity(dtype.lanes as usize);
                for &p in pieces {
                    let n = self.b.func.dfg.value_type(p).lane_count();
                    for j in 0..n {
                        let x = self.b.ins().extractlane(p, j as u8);
                        out.push(if dtype.is_bool() { self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0) } else { x });
                    }
                }
                out
            }
        }
    }

    /// A value of `dtype` in its natural layout, built from scalar lanes.
    pub fn pack_lanes(&mut self, dtype: DType, lanes: &[Value]) -> Val {
        assert_eq!(lanes.len(), dtype.lanes as usize, "lane count of {dtype}");
        if !is_pieces(dtype) {
            return Val::Lanes(lanes.to_vec());
        }
        let pty = piece_type(dtype.scalar);
        let pieces = lanes
            .chunks(lanes_per_piece(dtype.scalar) as usize)
            .map(|chunk| {
                let mut piece = None;
                for (j, &x) in chunk.iter().enumerate() {
                    let x = if dtype.is_bool() { self.b.ins().ineg(x) } else { x };
                    piece = Some(match piece {
                        None => self.first_lane(pty, x),
                        Some(p) => self.b.ins().insertlane(p, x, j as u8),
                    });
                }
                piece.expect("non-empty piece")
            })
            .collect();
        Val::Pieces(pieces)
    }

    /// `v` in the natural layout of `dtype`; only bool vectors can be elsewhere.
    pub fn natural(&mut self, v: Val, dtype: DType) -> Val {
        if !dtype.is_bool() || dtype.is_scalar() {
            return v;
        }
        if is_pieces(dtype) { Val::Pieces(self.masks(v, dtype, 8)) } else { Val::Lanes(self.lanes(&v, dtype)) }
    }

    /// A bool vector as lane masks `bits` wide; `lanes * bits` must fill whole pieces.
    pub fn masks(&mut self, v: Val, dtype: DType, bits: u32) -> Vec<Value> {
        assert!(dtype.is_bool() && (dtype.lanes as u32 * bits).is_multiple_of(128), "masks of {dtype} at {bits} bits");
        match v {
            Val::Pieces(mut pieces) => {
                let mut w = self.b.func.dfg.value_type(pieces[0]).lane_bits();
                while w > bits {
                    // Narrowing keeps the low half of each lane, and a mask lane is all ones or zeros.
                    pieces = self.narrow_wrap(&pieces);
                    w /= 2;
                }
                while w < bits {
                    pieces = self.widen(&pieces, true);
                    w *= 2;
                }
                pieces
            }
            Val::Lanes(lanes) => {
                let mty = mask_type(bits);
                let lane_ty = mty.lane_type();
                lanes
                    .chunks(mty.lane_count() as usize)
                    .map(|chunk| {
                        let mut piece = None;
                        for (j, &x) in chunk.iter().enumerate() {
                            let x = if lane_ty == types::I8 { x } else { self.b.ins().uextend(lane_ty, x) };
                            let m = self.b.ins().ineg(x);
                            piece = Some(match piece {
                                None => self.first_lane(mty, m),
                                Some(p) => self.b.ins().insertlane(p, m, j as u8),
                            });
                        }
                        piece.expect("non-empty piece")
                    })
                    .collect()
            }
        }
    }

    /// A vector of type `ty` with `x` in lane 0 (other lanes unspecified).
    fn first_lane(&mut self, ty: Type, x: Value) -> Value {
        if ty.lane_type() == types::I8 {
            // x64 has no byte move into a vector register; move 32 bits instead.
            let wide = self.b.ins().uextend(types::I32, x);
            let v = self.b.ins().scalar_to_vector(types::I32X4, wide);
            self.bitcast_vec(v, ty)
        } else {
            self.b.ins().scalar_to_vector(ty, x)
        }
    }

    /// The scalar `x` in every lane of `dtype`.
    pub fn broadcast(&mut self, dtype: DType, x: Value) -> Val {
        if dtype.is_scalar() {
            return Val::scalar(x);
        }
        if !is_pieces(dtype) {
            return Val::Lanes(vec![x; dtype.lanes as usize]);
        }
        let x = if dtype.is_bool() { self.b.ins().ineg(x) } else { x };
        let piece = self.b.ins().splat(piece_type(dtype.scalar), x);
        Val::Pieces(vec![piece; (dtype.lanes / lanes_per_piece(dtype.scalar)) as usize])
    }

    /// Reinterprets a 128-bit vector as another 128-bit vector type.
    pub fn bitcast_vec(&mut self, v: Value, ty: Type) -> Value {
        if self.b.func.dfg.value_type(v) == ty {
            return v;
        }
        let flags = MemFlagsData::new().with_endianness(Endianness::Little);
        self.b.ins().bitcast(ty, flags, v)
    }

    pub fn vconst(&mut self, ty: Type, bytes: [u8; 16]) -> Value {
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes.to_vec()));
        self.b.ins().vconst(ty, c)
    }

    /// `f32x4` with `x` in every lane.
    pub fn splat_f32(&mut self, x: f32) -> Value {
        let mut bytes = [0u8; 16];
        for lane in bytes.chunks_mut(4) {
            lane.copy_from_slice(&x.to_le_bytes());
        }
        self.vconst(types::F32X4, bytes)
    }

    /// A vector constant of integer lanes (each value wraps to the lane width).
    pub fn vconst_ints(&mut self, ty: Type, values: &[i64]) -> Value {
        let lane_bytes = ty.lane_bits() as usize / 8;
        let mut bytes = [0u8; 16];
        for (j, v) in values.iter().enumerate() {
            bytes[j * lane_bytes..(j + 1) * lane_bytes].copy_from_slice(&v.to_le_bytes()[..lane_bytes]);
        }
        self.vconst(ty, bytes)
    }

    /// Shuffle of the bytes of `a` and `b` (indices 0-15 pick from `a`, 16-31 from `b`).
    pub fn shuffle_bytes(&mut self, a: Value, b: Value, mask: [u8; 16]) -> Value {
        let a = self.bitcast_vec(a, types::I8X16);
        let b = self.bitcast_vec(b, types::I8X16);
        let imm = self.b.func.dfg.immediates.push(ConstantData::from(mask.to_vec()));
        self.b.ins().shuffle(a, b, imm)
    }

    /// 128-bit pieces of type `ty` made of `chunks` in order: 128-bit chunks are the pieces,
    /// 32- or 64-bit ones are put into lanes (a splat when a piece repeats one chunk). Equal
    /// pieces are built once.
    pub fn pieces_of_chunks(&mut self, chunks: &[Value], ty: Type) -> Vec<Value> {
        let chunk_ty = self.b.func.dfg.value_type(chunks[0]);
        if chunk_ty.bits() == 128 {
            return chunks.to_vec();
        }
        let vector_ty = chunk_ty.by(128 / chunk_ty.bits()).expect("32- or 64-bit chunks");
        let mut built: HashMap<&[Value], Value> = HashMap::default();
        let mut pieces = Vec::with_capacity(chunks.len() / vector_ty.lane_count() as usize);
        for group in chunks.chunks(vector_ty.lane_count() as usize) {
            let piece = match built.get(group) {
                Some(&p) => p,
                None => {
                    let p = if group.iter().all(|&c| c == group[0]) {
                        self.b.ins().splat(vector_ty, group[0])
                    } else {
                        let first = self.b.ins().scalar_to_vector(vector_ty, group[0]);
                        group
                            .iter()
                            .enumerate()
                            .skip(1)
                            .fold(first, |p, (j, &c)| self.b.ins().insertlane(p, c, j as u8))
                    };
                    let p = self.bitcast_vec(p, ty);
                    built.insert(group, p);
                    p
                }
            };
            pieces.push(piece);
        }
        pieces
    }

    /// Halves the lane width of integer pieces, keeping the low bits of each lane: two input
    /// pieces make one output piece.
    pub fn narrow_wrap(&mut self, pieces: &[Value]) -> Vec<Value> {
        assert!(pieces.len().is_multiple_of(2), "narrowing needs pairs of pieces");
        let ty = self.b.func.dfg.value_type(pieces[0]);
        let in_bytes = ty.lane_bits() as usize / 8;
        let out_ty = mask_type(ty.lane_bits() / 2);
        let mut mask = [0u8; 16];
        for (k, m) in mask.iter_mut().enumerate() {
            let (lane, byte) = (k / (in_bytes / 2), k % (in_bytes / 2));
            *m = (lane * in_bytes + byte) as u8;
        }
        pieces
            .chunks(2)
            .map(|pair| {
                let r = self.shuffle_bytes(pair[0], pair[1], mask);
                self.bitcast_vec(r, out_ty)
            })
            .collect()
    }

    /// Doubles the lane width of integer pieces by sign or zero extension: each input piece
    /// makes two output pieces.
    pub fn widen(&mut self, pieces: &[Value], signed: bool) -> Vec<Value> {
        let mut out = Vec::with_capacity(pieces.len() * 2);
        for &p in pieces {
            let (lo, hi) = if signed {
                (self.b.ins().swiden_low(p), self.b.ins().swiden_high(p))
            } else {
                (self.b.ins().uwiden_low(p), self.b.ins().uwiden_high(p))
            };
            out.push(lo);
            out.push(hi);
        }
        out
    }
}
