// y = x * factor + y, in HLSL: `x` in set 0, `y` in set 1 (a register
// space is a descriptor set), the push constants a struct.
struct Params { float factor; uint n; };
[[vk::push_constant]] ConstantBuffer<Params> params;
StructuredBuffer<float> x : register(t0, space0);
RWStructuredBuffer<float> y : register(u0, space1);
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    if (id.x < params.n) y[id.x] = x[id.x] * params.factor + y[id.x];
}
